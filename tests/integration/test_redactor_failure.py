"""A redactor failure fails closed: the append is a 500 problem and nothing unredacted is stored, cached or served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

from tests.integration.conftest import make_settings, open_app

pytestmark = pytest.mark.services
SECRET = "AKIAQX7ZP3MB5LRT2WNV"  # an AWS access key id shape


def test_a_failing_redactor_stores_and_serves_nothing(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redactor raising (the injected fault) turns the append into a 500 problem; no turn, session, Redis key or body holds the secret."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)
    with open_app(settings) as api:
        client, res, auth = api.client, api.res, api.auth

        def broken(*_: Any, **__: Any) -> Any:
            raise RuntimeError("rule catalog unreadable")

        # on the class: the redactor is a frozen dataclass (and this process has only this app)
        for name in ("redact_text", "redact_value", "redact_block"):
            monkeypatch.setattr(type(res.redactor), name, broken)
        body = {"messages": [{"role": "user", "content": f"deploy with {SECRET}"}]}
        r = client.post("/v1/sessions/s/turns", json=body, headers=auth)
        assert r.status_code in (500, 503), r.text
        assert r.headers["content-type"] == "application/problem+json" and SECRET not in r.text
        monkeypatch.undo()
        assert client.get("/v1/sessions/s", headers=auth).status_code == 404
        assert client.get("/v1/sessions/s/prompt", headers=auth).status_code == 404
        with res.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM turns")).scalar() == 0
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 0
        r2 = redis.Redis.from_url(redis_url)
        for k in r2.scan_iter(f"{settings.redis_prefix}*"):
            assert SECRET.encode() not in repr(r2.dump(k)).encode()
        r2.close()
