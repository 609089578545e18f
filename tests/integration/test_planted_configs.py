"""Credentials of every config-format corpus file, read by an agent as tool results, never reach the
database, Redis, files, logs, the summarizer or a response: the planting property of
test_planted_secrets.py (whose service and dumps this reuses) with config files (issue 25), through
the API and through the offline `compactd compact`, offloaded files and archives included.

Two corpora: tests/data/configs (every credential caught) and the public-config corpus (fetched
upstream example files with planted credentials, tests/data/public_configs, issue 42). In the
public one the redactor leaves some credentials when it reads a file whole (positions no name
marks: hostapd's EAP user file, a Kafka JAAS user list, pgpool's `user:md5` lines;
tests/unit/test_public_configs.py counts them); those may appear, and nothing else may."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

import tests.integration.test_planted_secrets as planted
from ops.bench.configs import PUBLIC_CONFIGS, ConfigFile, load
from tests.fakes.messages_api import FakeMessagesAPI
from tests.integration.test_offline_files import compact
from worker.flows import compact as jobs
from worker.redaction import Redactor

pytestmark = pytest.mark.services

# the fixtures of test_planted_secrets: a service with a stand-in summarizer behind it
service, messages_api = planted.service, planted.messages_api
FILES = load()


def _public() -> list[ConfigFile]:
    return [f for half in ("dev", "held") for f in load(PUBLIC_CONFIGS / half)]


CORPORA: dict[str, Callable[[], list[ConfigFile]]] = {"configs": lambda: FILES, "public": _public}


def _leaks(files: list[ConfigFile], places: dict[str, str]) -> list[str]:
    """Each credential found in a place (as written or JSON-unescaped), but those `_left` allows."""
    left = _left(files)
    unescaped = {
        k: v.replace("\\\\", "\\").replace('\\"', '"').replace("\\/", "/") for k, v in places.items()
    }
    return [
        f"{where}: {name} {secret!r}"
        for name, secret in _needles(files).items()
        for where, text in unescaped.items()
        if secret not in left and (secret in text or secret in places[where])
    ]


def _left(files: list[ConfigFile]) -> set[str]:
    """The credentials a redactor leaves in a file read whole: what may appear (none in `configs`)."""
    redactor = Redactor(b"any key")
    return {s for f in files for line in f.lines for s in line.secrets if s in redactor.redact_text(f.text)}


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


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_planted_config_credentials_appear_nowhere(
    service: planted.Service,
    messages_api: FakeMessagesAPI,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    corpus: str,
) -> None:
    """Every credential of every config format, read whole and cat'ed together (offloaded), is in no
    DB row, Redis key or value, file, log line, summarizer request or served response."""
    files = CORPORA[corpus]()
    svc, prefix, sid = service, service.res.settings.redis_prefix, f"c-{corpus}"
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        r = svc.call(
            "POST",
            f"/v1/sessions/{sid}/turns",
            json={"messages": _messages(files), "context_window": 200_000},
        )
        assert r.status_code == 200, r.text
        redis_before_job = planted._redis_dump(redis_url, prefix)
        assert (
            svc.call("POST", f"/v1/sessions/{sid}/compact", json={"focus": "compact-me"}).status_code == 202
        )
        tenant, pk, version = svc.sent[-1]
        assert jobs.compact(tenant, pk, version, svc.res) == "published"
        for path in ("/prompt", "", "/files"):
            assert svc.call("GET", f"/v1/sessions/{sid}{path}").status_code == 200
        for f in json.loads(svc.seen[-1])["files"]:
            assert svc.call("GET", f"/v1/sessions/{sid}/files/{f['ref']}").status_code == 200
    places = {
        "database": planted._database_dump(svc.res.engine),
        "redis": redis_before_job + planted._redis_dump(redis_url, prefix),
        "responses": "\n".join(svc.seen),
        "logs": repr(logs) + caplog.text,
        "summarizer": "\n".join(json.dumps(r.body) for r in messages_api.requests),
    }
    assert messages_api.requests, "the summarizer was not called: nothing was tested there"
    assert re.search(r'"kind":\s*"offload"', places["responses"]), "nothing was offloaded to a file"
    leaks = _leaks(files, places)
    assert leaks == [], f"{len(leaks)} leaks:\n" + "\n".join(leaks)
    assert "[REDACTED:" in places["database"]


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_planted_config_credentials_appear_nowhere_offline(tmp_path: Path, corpus: str) -> None:
    """`compactd compact` on the same session writes no credential to its request, its offloaded
    files or its archives (at a 16k window the cat outputs are offloaded and the span archived)."""
    files = CORPORA[corpus]()
    messages = _messages(files)
    # the files cat'ed four times over, past the offload threshold (10k tokens) however small the corpus
    whole = "\n".join(f"==> {f.name} <==\n{f.text}" for f in files * 4)
    messages[-1:-1] = planted._tool_unit(len(files) + 1, {"command": "cat /srv/app/* /srv/app/*"}, whole)
    session = tmp_path / "session.json"
    session.write_text(json.dumps({"system": "You are a coding agent.", "messages": messages}))
    done = compact(tmp_path, str(session), "--json", "--out", str(tmp_path / "files"), window="16000")
    written = {p.name: p.read_text(errors="replace") for p in (tmp_path / "files").iterdir()}
    assert any(n.startswith("f_") for n in written) and any(n.startswith("h_") for n in written), sorted(
        written
    )
    places = {"request": done.stdout, "stderr": done.stderr, **written}
    leaks = _leaks(files, places)
    assert leaks == [], f"{len(leaks)} leaks:\n" + "\n".join(leaks)
