"""Every positive sample of ../shared/data/secrets, planted through the HTTP API in every encoding an
agent's transcript carries (plain, base64, percent-encoded, JSON-escaped, split across two turns,
inside an output large enough to be offloaded, inside tool-call inputs), appears nowhere afterwards:
not in served prompts or any other response, error bodies included, the database (file payloads
decompressed), Redis (cache keys and the broker queue), virtual files and archives, logs, or the
summarizer's requests.

Each encoding runs against a service of its own (own SQLite file, Redis prefix and Celery queue, its
own captured logs), so a leak is charged to the encoding that let it through. Each sample is one test
id, `<encoding>-<sample id>`; the samples the pipeline lets through today are listed in
`planted_corpus_leaks.json` beside this file and xfail with their reason (strict: a fix shows).

What counts as the secret appearing (the "8-character substring" rule): the sample's credential, or
any 8-character window of it, searched in every place and in that place decoded (base64 runs,
percent escapes, JSON escapes), because a leak in an encoding is still a leak. The credential is
the sample's secret as ops/bench/secrets_scoring.py reads it; of several capture groups (user,
password, host) the one most like key material. A window counts only when it is key material: it
mixes at least two of lower case, upper case and digits, has four or more distinct characters, and
does not also occur in the sample outside the secret. So `@yelp.com`, `_token_l`, `PASSWORD`,
`xxxxxxxx` (host names, words, padding, one character class) and the `AKIA` next to an example key
are not needles; the whole secret always is, whatever it looks like.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
import structlog
from fastapi.testclient import TestClient
from sqlalchemy import text

from ops.bench.secrets_scoring import _in_policy, _secrets_of
from tests.conftest import data_dir, require
from tests.fakes.messages_api import FakeMessagesAPI, reply
from tests.integration.conftest import REDIS_URL, answers, flush_prefix, make_settings
from tests.integration.test_planted_secrets import _database_dump, _redis_dump
from worker import jobs
from worker.resources import Resources
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services, pytest.mark.data, pytest.mark.slow]  # ~70 s: 7 services, 674 samples each

KNOWN_LEAKS = Path(__file__).with_name("planted_corpus_leaks.json")
ENCODINGS = ("plain", "base64", "percent", "json", "split", "offloaded", "tool_input")
BATCH = 40  # samples per append request
FILLER = "\n".join(f"{i:05d} resolving dependency graph: ok" for i in range(300))  # ~3k tokens


@dataclass(frozen=True)
class Sample:
    id: str
    text: str
    secrets: tuple[str, ...]
    in_policy: bool


def _samples() -> list[Sample]:
    root = data_dir() / "secrets"
    out: list[Sample] = []
    for path in sorted(root.glob("*.jsonl")) if root.is_dir() else []:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("label") != "positive":
                continue
            secrets = [s for s in _secrets_of(row) if s.strip()]
            if secrets:
                out.append(Sample(row["id"], row["text"], tuple(secrets), _in_policy(row, secrets)))
    return out


SAMPLES = _samples()


def windows(secret: str, sample_text: str) -> set[str]:
    """The needles that stand for the secret: itself, and its 8-character windows of key material."""
    if len(secret) < 8:
        return {secret}
    outside = sample_text.replace(secret, "\0")
    found = {secret}
    for i in range(len(secret) - 7):
        w = secret[i : i + 8]
        if w in outside or len(set(w)) < 4 or _classes(w) < 2:
            continue
        found.add(w)
    return found


def _classes(s: str) -> int:
    """How many of lower case, upper case and digits occur: words and host names have one."""
    return sum(any(f(c) for c in s) for f in (str.islower, str.isupper, str.isdigit))


def credential(secrets: tuple[str, ...]) -> str:
    """Of a sample's capture groups (user, password, host), the one most like key material."""
    return max(secrets, key=lambda s: (_classes(s), len(set(s)), len(s)))


def test_windows_keep_key_material_and_drop_words_and_context() -> None:
    """Windows of a key are needles; its neighbour text, words and repeated characters are not."""
    got = windows("AKIAQ7RZ2MXPL9TKW3B4", "id=AKIAQ7RZ2MXPL9TKW3B4 AKIAQ7RZ")
    assert "Q7RZ2MXP" in got and "AKIAQ7RZ" not in got
    assert windows("passwordpassword", "x") == {"passwordpassword"}
    assert windows("hunter2", "pw hunter2") == {"hunter2"}
    assert windows("xxxxxxxxxxxx", "") == {"xxxxxxxxxxxx"}
    assert credential(("admin", "db.example.com", "s3cR3tPa55")) == "s3cR3tPa55"


def _split_at(sample: Sample) -> int:
    """Where the text is cut in two: the middle of its (first) secret."""
    secret = sample.secrets[0]
    at = sample.text.find(secret)
    return at + len(secret) // 2 if at >= 0 else len(sample.text) // 2


def _tool_unit(tid: str, tool_input: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": tool_input}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": result}]},
    ]


def _text_pair(user: str, assistant: str = "Noted.") -> list[dict[str, Any]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def _messages(encoding: str, n: int, s: Sample) -> list[dict[str, Any]]:
    """The turns that carry one sample in one encoding (whole tool loops or user/assistant pairs)."""
    t = s.text
    if encoding == "plain":
        return _text_pair(f"Here is the config I found:\n{t}")
    if encoding == "base64":
        return _text_pair(f"The file, base64: {base64.b64encode(t.encode()).decode()}")
    if encoding == "percent":
        return _text_pair(f"Open https://example.test/view?file={quote(t, safe='')}")
    if encoding == "json":
        return _text_pair('{"file": "' + json.dumps(t)[1:-1] + '"}')
    if encoding == "split":
        cut = _split_at(s)
        return [{"role": "user", "content": t[:cut]}, {"role": "assistant", "content": t[cut:]}]
    if encoding == "offloaded":
        return _tool_unit(f"toolu_off{n:05d}", {"command": "cat build.log"}, f"{FILLER}\n{t}\n{FILLER}")
    if encoding == "tool_input":
        return _tool_unit(
            f"toolu_in{n:05d}", {"command": "deploy", "file_text": t, "env": {"CONFIG": t}}, "done"
        )
    raise AssertionError(encoding)


def _views(place: str) -> list[str]:
    """A place as stored, and decoded: base64 runs, percent escapes, JSON escapes."""
    views = [place, unquote(place)]
    views.append(place.replace('\\"', '"').replace("\\/", "/").replace("\\n", "\n").replace("\\\\", "\\"))
    decoded = []
    for run in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", place):
        try:
            decoded.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode("utf-8", "ignore"))
        except (binascii.Error, ValueError):
            continue
    views.append("\n".join(decoded))
    return views


def _hits(places: dict[str, str], needles: set[str]) -> dict[str, set[str]]:
    """needle -> the places whose text (or a decoded view of it) contains it. One pass of 8-character
    windows per view: a longer needle is checked where its first eight characters are found, and the
    few shorter ones are searched whole."""
    by_head: dict[str, list[str]] = {}
    for n in needles:
        if len(n) >= 8:
            by_head.setdefault(n[:8], []).append(n)
    short = [n for n in needles if len(n) < 8]
    found: dict[str, set[str]] = {}
    for where, place in places.items():
        for view in _views(place):
            for i in range(len(view) - 7):
                for n in by_head.get(view[i : i + 8], ()):
                    if view.startswith(n, i):
                        found.setdefault(n, set()).add(where)
            for n in short:
                if n in view:
                    found.setdefault(n, set()).add(where)
    return found


def _plant(encoding: str, tmp: Path, messages_api: FakeMessagesAPI) -> dict[str, list[str]]:
    settings = make_settings(
        tmp,
        f"sqlite:///{tmp / 'compactd.db'}",
        REDIS_URL,
        idle_seconds=0.0,
        offload_tokens=2_000,
        preview_tokens=100,
        summarizer="anthropic",
        anthropic_api_key="sk-ant-test-key-not-a-secret",
        anthropic_base_url=messages_api.base_url,
        anthropic_max_retries=0,
    )
    seen: list[str] = []
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.DEBUG)
    handler = _Collect()
    logging.getLogger().addHandler(handler)
    try:
        with structlog.testing.capture_logs() as logs, TestClient(create_app_for(settings)) as client:
            res: Resources = client.app.state.resources  # type: ignore[attr-defined]
            key = create_tenant(res.engine, "corpus")[1]
            auth = {"Authorization": f"Bearer {key}"}

            def call(method: str, path: str, **kw: Any) -> Any:
                r = client.request(method, path, headers={**auth, **kw.pop("headers", {})}, **kw)
                seen.append(r.text)
                return r

            sid = f"corpus-{encoding}"
            first = {"context_window": 60_000, "output_reserve": 4_000}
            for b in range(0, len(SAMPLES), BATCH):
                batch = SAMPLES[b : b + BATCH]
                msgs = [m for n, s in enumerate(batch, start=b) for m in _messages(encoding, n, s)]
                if b == 0:
                    msgs = [
                        {"role": "user", "content": "Audit these configs."},
                        {"role": "assistant", "content": "Ok."},
                        *msgs,
                    ]
                r = call(
                    "POST", f"/v1/sessions/{sid}/turns", json={"messages": msgs, **(first if b == 0 else {})}
                )
                assert r.status_code == 200, r.text[:500]
            if encoding == "plain":
                for s in SAMPLES:  # refused whole: an unknown block type; the body must not come back
                    bad = {"messages": [{"role": "user", "content": [{"type": "bogus", "text": s.text}]}]}
                    assert call("POST", f"/v1/sessions/{sid}/turns", json=bad).status_code == 422
            assert (
                call(
                    "POST", f"/v1/sessions/{sid}/compact", json={"focus": "keep the config facts"}
                ).status_code
                == 202
            )
            with res.engine.connect() as conn:
                tenant, pk, version = conn.execute(
                    text("SELECT tenant_id, id, version FROM sessions WHERE client_id = :c"), {"c": sid}
                ).one()
            assert jobs.compact(tenant, pk, version, res) == "published"
            for path in ("/prompt", "", "/memory", "/files"):
                assert call("GET", f"/v1/sessions/{sid}{path}").status_code == 200
            files = json.loads(seen[-1])["files"]
            for f in files:
                assert call("GET", f"/v1/sessions/{sid}/files/{f['ref']}").status_code == 200
            broker = _redis_dump(REDIS_URL, settings.queue)  # the Celery queue: ids only, by design
            places = {
                "database": _database_dump(res.engine),
                "redis": _redis_dump(REDIS_URL, settings.redis_prefix) + broker,
                "responses": "\n".join(seen),
                "logs": repr(logs) + "\n".join(handler.lines),
                "summarizer": "\n".join(json.dumps(r.body) for r in messages_api.requests),
            }
            assert {f["kind"] for f in files} >= ({"offload"} if encoding == "offloaded" else set())
            assert any(f["kind"] == "archive" for f in files), "nothing was summarized: archives untested"
            assert messages_api.requests, "the summarizer was not called: nothing was tested there"
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
        flush_prefix(REDIS_URL, settings.redis_prefix)
        flush_prefix(REDIS_URL, settings.queue)
    needles = {s.id: windows(credential(s.secrets), s.text) for s in SAMPLES}
    found = _hits(places, set().union(*needles.values()))
    return {sid: sorted({p for w in ws for p in found.get(w, ())}) for sid, ws in needles.items()}


def create_app_for(settings: Any) -> Any:
    from api.app import create_app

    return create_app(settings)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, list[str]]]]:
    require(bool(SAMPLES), f"no secret samples under {data_dir() / 'secrets'}")
    require(answers("127.0.0.1", 6379), "Redis not answering on 127.0.0.1:6379 (run `make services`)")
    out = {}
    for encoding in ENCODINGS:
        with FakeMessagesAPI(default=reply("## Task\nAudit.\n\n## Next planned action\nGo on.")) as api:
            out[encoding] = _plant(encoding, tmp_path_factory.mktemp(encoding), api)
    yield out


def _known() -> dict[str, dict[str, str]]:
    return json.loads(KNOWN_LEAKS.read_text()) if KNOWN_LEAKS.exists() else {}


def _cases() -> Iterator[Any]:
    known = _known()
    for encoding in ENCODINGS:
        for s in SAMPLES:
            why = known.get(encoding, {}).get(s.id)
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            yield pytest.param(encoding, s.id, id=f"{encoding}-{s.id}", marks=marks)


@pytest.mark.parametrize(("encoding", "sample_id"), list(_cases()))
def test_planted_sample_appears_nowhere(
    planted: dict[str, dict[str, list[str]]], encoding: str, sample_id: str
) -> None:
    """The sample's secret, and every 8-character window of it, is in no place the service keeps or sends."""
    assert planted[encoding][sample_id] == []


def _reason(encoding: str, sample: Sample, leaks_plain: bool) -> str:
    if not sample.in_policy:
        return (
            "out of policy: an identifier or a placeholder, not a credential (ops/bench/secrets_scoring.py)"
        )
    if encoding == "plain" or leaks_plain:
        return "the redactor does not detect this sample (held-out recall ~0.7, BENCHMARKS.md 'Secret redaction')"
    return {
        "base64": "not detected base64-encoded: base64 is decoded only in document sources, not inside text",
        "percent": "not detected percent-encoded: the escaped `=`, `:` and quotes hide the context its rule needs",
        "json": "not detected JSON-escaped inside text: the escaped quotes and newlines hide its context",
        "split": "split across two turns: each turn is scanned alone, neither half is a whole secret",
        "offloaded": "not detected inside a large output next to unrelated lines",
        "tool_input": "not detected as a tool-call input value",
    }[encoding]


if __name__ == "__main__":
    # Regenerate planted_corpus_leaks.json: python -m tests.integration.test_planted_corpus
    import tempfile

    results = {}
    for enc in ENCODINGS:
        with FakeMessagesAPI(default=reply("## Task\nAudit.")) as api:
            results[enc] = _plant(enc, Path(tempfile.mkdtemp(prefix=f"corpus-{enc}-")), api)
    by_id = {s.id: s for s in SAMPLES}
    known = {
        enc: {
            sid: f"{_reason(enc, by_id[sid], bool(results['plain'][sid]))}; found in {', '.join(where)}"
            for sid, where in sorted(res.items())
            if where
        }
        for enc, res in results.items()
    }
    KNOWN_LEAKS.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    print({enc: len(v) for enc, v in known.items()}, "of", len(SAMPLES))
