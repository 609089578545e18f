"""Credentials of every config-format corpus file, read by an agent as tool results, never reach the
database, Redis, files, logs, the summarizer or a response: the planting property of
test_planted_secrets.py (whose service and dumps this reuses) with config files (issue 25)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
import structlog

import tests.integration.test_planted_secrets as planted
from ops.bench.configs import ConfigFile, load
from tests.fakes.messages_api import FakeMessagesAPI
from worker.flows import compact as jobs

pytestmark = pytest.mark.services

# the fixtures of test_planted_secrets: a service with a stand-in summarizer behind it
service, messages_api = planted.service, planted.messages_api
FILES = load()


def _needles(files: list[ConfigFile]) -> dict[str, str]:
    """Each credential that names itself: one that occurs nowhere in the corpus outside credential
    positions nor in the conversation (`admin` is also a user name), by `file:line`."""
    outside = "\n".join(line.outside for f in files for line in f.lines) + _conversation_words()
    outside += "\n".join(f"/srv/app/{f.name}" for f in files)  # the paths the agent read
    return {
        f"{f.name}:{i + 1}": secret
        for f in files
        for i, line in enumerate(f.lines)
        for secret in line.secrets
        if len(secret) >= 4 and secret not in outside
    }


def _conversation_words() -> str:
    return "Read cat every config file of the project show the rest Noted done compact-me"


def _messages(files: list[ConfigFile]) -> list[dict[str, Any]]:
    """Each file read alone (`Read`), then all of them in one `cat` output big enough to be offloaded."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "Read every config file of the project."}]
    for n, f in enumerate(files):
        out += planted._tool_unit(n, {"file_path": f"/srv/app/{f.name}"}, f.text, name="Read")
    whole = "\n".join(f"==> {f.name} <==\n{f.text}" for f in files)
    out += planted._tool_unit(len(files), {"command": "cat /srv/app/*"}, whole)
    out.append({"role": "user", "content": "Noted; show the rest."})
    return out


def test_needles_are_most_credentials() -> None:
    """The property below looks for most of the corpus's credentials, weak passwords among them."""
    needles = _needles(FILES)
    total = sum(len(line.secrets) for f in FILES for line in f.lines)
    assert len(needles) >= 0.8 * total
    assert {"irc_pass", "wp_pass", "mailpass", "letmein"} <= set(needles.values())


def test_planted_config_credentials_appear_nowhere(
    service: planted.Service, messages_api: FakeMessagesAPI, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every credential of every config format, read whole and cat'ed together (offloaded), is in no
    DB row, Redis key or value, file, log line, summarizer request or served response."""
    svc, prefix = service, service.res.settings.redis_prefix
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        r = svc.call(
            "POST", "/v1/sessions/c/turns", json={"messages": _messages(FILES), "context_window": 200_000}
        )
        assert r.status_code == 200, r.text
        redis_before_job = planted._redis_dump(redis_url, prefix)
        assert svc.call("POST", "/v1/sessions/c/compact", json={"focus": "compact-me"}).status_code == 202
        tenant, pk, version = svc.sent[-1]
        assert jobs.compact(tenant, pk, version, svc.res) == "published"
        for path in ("/prompt", "", "/files"):
            assert svc.call("GET", f"/v1/sessions/c{path}").status_code == 200
        for f in json.loads(svc.seen[-1])["files"]:
            assert svc.call("GET", f"/v1/sessions/c/files/{f['ref']}").status_code == 200
    places = {
        "database": planted._database_dump(svc.res.engine),
        "redis": redis_before_job + planted._redis_dump(redis_url, prefix),
        "responses": "\n".join(svc.seen),
        "logs": repr(logs) + caplog.text,
        "summarizer": "\n".join(json.dumps(r.body) for r in messages_api.requests),
    }
    assert messages_api.requests, "the summarizer was not called: nothing was tested there"
    assert re.search(r'"kind":\s*"offload"', places["responses"]), "nothing was offloaded to a file"
    unescaped = {
        k: v.replace("\\\\", "\\").replace('\\"', '"').replace("\\/", "/") for k, v in places.items()
    }
    leaks = [
        f"{where}: {name} {secret!r}"
        for name, secret in _needles(FILES).items()
        for where, text in unescaped.items()
        if secret in text or secret in places[where]
    ]
    assert leaks == [], f"{len(leaks)} leaks:\n" + "\n".join(leaks)
    assert "[REDACTED:" in places["database"]
