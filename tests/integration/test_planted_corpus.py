"""Every positive sample of ../shared/data/secrets, planted through the HTTP API in every encoding an
agent's transcript carries (plain, base64, percent-encoded, JSON-escaped, split across two turns of
one append at the middle of its secret and across two appends a third into it, inside an output
large enough to be offloaded, inside tool-call inputs), appears nowhere afterwards:
not in served prompts or any other response, error bodies included, the database (file payloads
decompressed), Redis (cache keys and the broker queue), virtual files and archives, logs, or the
summarizer's requests.

Each encoding runs against a service of its own (own SQLite file, Redis prefix and Celery queue, its
own captured logs), so a leak is charged to the encoding that let it through, and all of it twice:
under the standard redaction profile and the strict one (COMPACTD_REDACTION=strict, which also
takes references, placeholders and identifiers). Each (profile, encoding) is one test,
`<profile>-<encoding>`, that plants every sample and reports every sample that breaks the rule in
one failure message. Under the strict profile none may appear, with no exception; the samples the
standard profile lets through are listed in `planted_corpus_leaks.json` beside this file with their
reason, and a listed sample that no longer leaks fails the test too (a fix shows: drop it from the
list). The one rule whose samples hold no credential (`_NO_CREDENTIAL`) is left out.

What counts as the secret appearing (the "8-character substring" rule): the sample's credential, or
any 8-character window of it, searched in every place and in that place decoded (base64 runs,
percent escapes, JSON escapes), because a leak in an encoding is still a leak. The credential is
the sample's secret as ops/bench/secrets_scoring.py reads it, except where that names more than
the credential: of a rule's capture groups (user, password, host) the password, of a
`user:password` pair the password, of a guessed URL tail the key in it (see `credential`). A
window counts only when it is key material: it mixes at least two of lower case, upper case and
digits, has four or more distinct characters, and occurs in no sample outside that sample's secret.
So `@yelp.com`, `_token_l`, `PASSWORD`, `xxxxxxxx` (host names, words, padding, one character
class), the `AKIA` next to an example key and a key name another sample uses are not needles; the
whole secret always is. A secret too short or too plain to search alone (`secret`, `admin`) is
searched with the two characters either side of it (`r:secret@`).

Where the corpus names no secret, the scorer's guess (the last long token) is corrected where it
is plainly not the secret (`_GUESS`: the address of an `ip_public` sample, not the word after it).
A plain-word secret's occurrence that a quoted value follows is its key (`password 'password'`).

The corpus repeats example keys across samples, so a needle found is charged to the samples whose
own stored turns hold it (`attribute`); one that no sample's turns hold (it leaked after ingest)
is charged to every sample it stands for.
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
from ahocorasick_rs import AhoCorasick
from fastapi.testclient import TestClient
from sqlalchemy import text

from ops.bench.secrets_scoring import _in_policy, _secrets_of
from tests.conftest import data_dir, require
from tests.factories import exchange, tool_unit
from tests.fakes.messages_api import FakeMessagesAPI, reply
from tests.integration.conftest import REDIS_URL, answers, flush_prefix
from tests.integration.test_planted_secrets import _database_dump, _redis_dump, planting_settings
from worker.flows import compact as jobs
from worker.redaction.keywords import is_placeholder
from worker.redaction.positions import is_reference
from worker.resources import Resources
from worker.store.files import decompress
from worker.store.tenants import create_tenant

pytestmark = [
    pytest.mark.services,
    pytest.mark.data,
    pytest.mark.slow,
    # one planting: ~20-60 s on 2 cores (split_appends is 1,346 appends), more under load
    pytest.mark.timeout(900),
]  # 16 services, 673 samples each

KNOWN_LEAKS = Path(__file__).with_name("planted_corpus_leaks.json")
ENCODINGS = ("plain", "base64", "percent", "json", "split", "split_appends", "offloaded", "tool_input")
PROFILES = ("standard", "strict")
BATCH = 40  # samples per append request
FILLER = "\n".join(f"{i:05d} resolving dependency graph: ok" for i in range(300))  # ~3k tokens


@dataclass(frozen=True)
class Sample:
    id: str
    rule_id: str
    text: str
    secrets: tuple[str, ...]
    in_policy: bool
    guessed: bool  # the corpus names no secret: the scorer guessed it from the text


def _samples() -> list[Sample]:
    root = data_dir() / "secrets"
    out: list[Sample] = []
    for path in sorted(root.glob("*.jsonl")) if root.is_dir() else []:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("label") != "positive" or row["rule_id"] in _NO_CREDENTIAL:
                continue
            secrets = [s for s in _secrets_of(row) if s.strip()]
            fixed = _GUESS.get(row["rule_id"]) if not row.get("expected_secret") else None
            found = fixed.search(row["text"]) if fixed else None
            secrets = [found.group()] if found else secrets
            if secrets:
                out.append(
                    Sample(
                        row["id"],
                        row["rule_id"],
                        row["text"],
                        tuple(secrets),
                        _in_policy(row, secrets),
                        not row.get("expected_secret"),
                    )
                )
    return out


# where the scorer's guess of an unnamed secret is not the secret: a public IP sample's secret is the
# address (`133.133.133.133:8080@something else` guesses `something`), a Google OAuth sample's the
# client secret (not the redirect URI template after it)
_GUESS = {
    "ip_public": re.compile(r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b"),
    "np.google.6": re.compile(r"GOCSPX-[A-Za-z0-9_-]+"),
}
# rules whose positive samples hold no credential at all, so there is nothing to plant: the rule
# looks for a kind of file by its tag (the corpus names no secret: test_only_samples_that_name_no_secret_are_left_out)
_NO_CREDENTIAL = {"gcp-service-account": '`"type": "service_account"` is the type tag of a GCP key file'}

SAMPLES = _samples()


def windows(secret: str, sample_text: str, context: frozenset[str] = frozenset()) -> set[str]:
    """The needles that stand for the secret: itself, and its 8-character windows of key material
    that are not also `context` (the text around every sample's secret: `ClearTextPassword` is a
    key name in one sample, a window of `CleartextPassword1` is no needle).

    A secret too short or too plain to be searched alone (`secret`, `admin`, `password`: words
    that occur in any transcript, placeholders included) is searched with the two characters
    either side of it in the sample (`user:secret@`): the redactor replaces the secret, not them.
    """
    if len(secret) < 8 or _classes(secret) < 2:
        found = set()
        for at in (m.start() for m in re.finditer(re.escape(secret), sample_text)):
            if _WORDY.match(sample_text[at - 1 : at]) or _WORDY.match(sample_text[at + len(secret) :]):
                continue  # inside a longer word: `pyne` in `pyne-user`
            if _KEY_OF_VALUE.match(sample_text, at + len(secret)):
                continue  # the key of a quoted value: the first of `password 'password'`
            found.add(sample_text[max(0, at - 2) : at + len(secret) + 2])
        return found or {secret}
    outside = sample_text.replace(secret, "\0")
    found = {secret}
    for i in range(len(secret) - 7):
        w = secret[i : i + 8]
        if w in outside or w in context or len(set(w)) < 4 or _classes(w) < 2:
            continue
        if _HEX.fullmatch(w):
            # 8 hex digits turn up by chance among the random ids and hashes compactd keeps (a clean
            # run matched a webhook id's window in Redis only): a hex run is searched 12 at a time
            w = secret[i : i + 12]
            if len(w) < 12 or not _HEX.fullmatch(w) or w in outside:
                continue
        found.add(w)
    return found


_HEX = re.compile(r"[0-9a-fA-F]+")


def context_windows(samples: list[Sample]) -> frozenset[str]:
    """Every 8-character window of the samples' text outside every sample's secret, and of their
    base64 encodings (a JWT's segments are base64: `b2dsZWFw` is also in `googleapis` encoded)."""
    # every sample's credential is cut out of every text: a sample may quote another's key
    credentials = sorted({c for c in map(needle_secret, samples) if len(c) >= 8}, key=len, reverse=True)
    cut = re.compile("|".join(map(re.escape, credentials)))
    out: set[str] = set()
    for s in samples:
        parts = [p for piece in cut.split(s.text) for p in piece.split(needle_secret(s))]
        for part in [*parts, base64.b64encode(s.text.encode()).decode()]:
            out.update(part[i : i + 8] for i in range(len(part) - 7))
    return frozenset(out)


def _classes(s: str) -> int:
    """How many of lower case, upper case and digits occur: words and host names have one."""
    return sum(any(f(c) for c in s) for f in (str.islower, str.isupper, str.isdigit))


_WORDY = re.compile(r"[\w-]")
_KEY_OF_VALUE = re.compile(r"(?:[ \t]+|[ \t]*[:=][ \t]*)[\"'][^\"'\r\n]")

# noseyparker rules whose capture groups are (user, password, host); in the others with several
# groups the credential is the last one (user then password, id then secret, domain then key)
_PASSWORD_GROUP = {"np.postgres.1": 1, "np.mongodb.1": 1}
# gitleaks rules whose secret is a whole `user:password` pair (Basic auth, Sidekiq's credentials)
_USER_PASSWORD = {"curl-auth-user", "sidekiq-secret", "sidekiq-sensitive-url"}


def credential(rule_id: str, secrets: tuple[str, ...], guessed: bool = False) -> str:
    """The sample's credential: its one secret; of a rule's several capture groups the password (a
    connection string's `Password=` value); of a `user:password` pair the password. Where the
    corpus names no secret and the scorer's guess is a URL's tail (`...@host/_api/v2/`), its most
    key-like part."""
    if len(secrets) > 1:
        group = secrets[_PASSWORD_GROUP.get(rule_id, -1)]
        inner = re.search(r"(?i)\bpassword=([^;]+)", group)
        return inner.group(1) if inner else group
    secret = secrets[0]
    if rule_id in _USER_PASSWORD:
        return secret.rpartition(":")[2].strip("'\"")
    if guessed and ("@" in secret or "//" in secret):
        return max(re.split(r"[@/]", secret), key=lambda t: (_classes(t), len(t)))
    return secret


def needle_secret(s: Sample) -> str:
    return credential(s.rule_id, s.secrets, s.guessed)


def test_windows_keep_key_material_and_drop_words_and_context() -> None:
    """Windows of a key are needles; its neighbour text, words and repeated characters are not."""
    got = windows("AKIAQ7RZ2MXPL9TKW3B4", "id=AKIAQ7RZ2MXPL9TKW3B4 AKIAQ7RZ")
    assert "Q7RZ2MXP" in got and "AKIAQ7RZ" not in got
    assert "Q7RZ2MXP" not in windows(
        "AKIAQ7RZ2MXPL9TKW3B4", "id=AKIAQ7RZ2MXPL9TKW3B4", frozenset({"Q7RZ2MXP"})
    )
    assert windows("passwordpassword", "x: passwordpassword") == {": passwordpassword"}
    assert windows("hunter2", "pw hunter2") == {"w hunter2"}
    assert windows("secret", "user:secret@db, secret") == {"r:secret@d", ", secret"}
    assert credential("np.postgres.1", ("admin", "s3cR3tPa55", "db.example.com")) == "s3cR3tPa55"
    assert credential("np.psexec.1", ("Administrator", "dev_admin")) == "dev_admin"
    assert credential("np.generic.10", ("Conn", "Server=h;User ID=u;Password=#gets0m3;X=1")) == "#gets0m3"
    assert credential("sidekiq-secret", ("cafeb4b3:d3adb33f",)) == "d3adb33f"
    assert credential("keyword", ("A,.:-@*?!",)) == "A,.:-@*?!"
    assert credential("cloudant", ("abcd1234abcd@h.example.com/_api/v2/",), guessed=True) == "abcd1234abcd"
    assert windows("pyne", 'user "pyne-user" pw "pyne".') == {' "pyne".'}


def _split_at(sample: Sample, *, third: bool = False) -> int:
    """Where the text is cut in two: the middle of its (first) secret, or a third into it."""
    secret = sample.secrets[0]
    at = sample.text.find(secret)
    if at < 0:
        return len(sample.text) // 2
    return at + max(1, len(secret) // 3) if third else at + len(secret) // 2


def _messages(encoding: str, n: int, s: Sample) -> list[dict[str, Any]]:
    """The turns that carry one sample in one encoding (whole tool loops or user/assistant pairs)."""
    t = s.text
    if encoding == "plain":
        return exchange(f"Here is the config I found:\n{t}")
    if encoding == "base64":
        return exchange(f"The file, base64: {base64.b64encode(t.encode()).decode()}")
    if encoding == "percent":
        return exchange(f"Open https://example.test/view?file={quote(t, safe='')}")
    if encoding == "json":
        return exchange('{"file": "' + json.dumps(t)[1:-1] + '"}')
    if encoding == "split":
        cut = _split_at(s)
        return [{"role": "user", "content": t[:cut]}, {"role": "assistant", "content": t[cut:]}]
    if encoding == "offloaded":
        return tool_unit(f"toolu_off{n:05d}", {"command": "cat build.log"}, f"{FILLER}\n{t}\n{FILLER}")
    if encoding == "tool_input":
        return tool_unit(
            f"toolu_in{n:05d}", {"command": "deploy", "file_text": t, "env": {"CONFIG": t}}, "done"
        )
    raise AssertionError(encoding)


def _appends(encoding: str) -> Iterator[list[tuple[Sample, list[dict[str, Any]]]]]:
    """The appends that carry every sample: BATCH samples each, or, split across two appends, each
    half of each sample an append of its own (the first stored, redacted alone, before the second).
    A line of its own starts each sample: a sample's first half that began its message would be taken
    as the rest of the token the message before ends with (seams.continued), found or not."""
    if encoding == "split_appends":
        for s in SAMPLES:
            cut = _split_at(s, third=True)
            yield [(s, [{"role": "user", "content": "The next config:\n" + s.text[:cut]}])]
            yield [(s, [{"role": "assistant", "content": s.text[cut:]}])]
        return
    for b in range(0, len(SAMPLES), BATCH):
        yield [(s, _messages(encoding, n, s)) for n, s in enumerate(SAMPLES[b : b + BATCH], start=b)]


_JSON_ESCAPE = re.compile(r'\\(["/n\\])')


def _json_unescaped(text: str) -> str:
    """`\\"`, `\\/`, `\\n` and `\\\\` undone in one pass (`\\\\n` is a backslash and an n)."""
    return _JSON_ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def _views(place: str) -> list[str]:
    """A place as stored, and decoded: base64 runs, percent escapes, JSON escapes (one and two
    levels: a JSON-escaped message inside a stored JSON document)."""
    views = [place, unquote(place)]
    views += [_json_unescaped(place), _json_unescaped(_json_unescaped(place))]
    decoded = []
    for run in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", place):
        try:
            decoded.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode("utf-8", "ignore"))
        except (binascii.Error, ValueError):
            continue
    views.append("\n".join(decoded))
    return views


def _hits(places: dict[str, str], needles: set[str]) -> dict[str, set[str]]:
    """needle -> the places whose text (or a decoded view of it) contains it: one Aho-Corasick pass
    over each view finds every occurrence of every needle, overlapping ones included."""
    order = sorted(needles)
    if not order:
        return {}
    automaton = AhoCorasick(order)
    found: dict[str, set[str]] = {}
    for where, place in places.items():
        for view in _views(place):
            for i, _start, _end in automaton.find_matches_as_indexes(view, overlapping=True):
                found.setdefault(order[i], set()).add(where)
    return found


def _plant(profile: str, encoding: str, tmp: Path, messages_api: FakeMessagesAPI) -> dict[str, list[str]]:
    db = f"sqlite:///{tmp / 'compactd.db'}"
    settings = planting_settings(tmp, db, REDIS_URL, messages_api, preview_tokens=100, redaction=profile)
    seen: list[str] = []
    seqs: dict[str, list[int]] = {}  # sample id -> the seqs of its turns
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
            window = {"context_window": 60_000, "output_reserve": 4_000}
            next_seq = 1
            for b, appended in enumerate(_appends(encoding)):
                msgs = []
                if b == 0:
                    msgs = [
                        {"role": "user", "content": "Audit these configs."},
                        {"role": "assistant", "content": "Ok."},
                    ]
                for s, carried in appended:
                    first = next_seq + len(msgs)
                    # a sample the corpus holds twice: both copies are its turns
                    seqs[s.id] = [*seqs.get(s.id, []), *range(first, first + len(carried))]
                    msgs += carried
                r = call(
                    "POST", f"/v1/sessions/{sid}/turns", json={"messages": msgs, **(window if b == 0 else {})}
                )
                assert r.status_code == 200, r.text[:500]
                assert r.json()["first_seq"] == next_seq, r.text[:500]
                next_seq += len(msgs)
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
            # a secret split across two turns is whole again when the turns are read in order
            joined = _stored_by_sample(res, pk, seqs) if encoding.startswith("split") else {}
            places = {
                "database": _database_dump(res.engine) + "\n".join(joined.values()),
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
    context = context_windows(SAMPLES)
    needles = {s.id: windows(needle_secret(s), s.text, context) for s in SAMPLES}
    found = _hits(places, set().union(*needles.values()))
    return attribute(found, needles, _stored_by_sample(res, pk, seqs))


def _stored_by_sample(res: Resources, pk: int, seqs: dict[str, list[int]]) -> dict[str, str]:
    """sample id -> its turns as stored, with the offloaded files they point to."""
    with res.engine.connect() as conn:
        turns: dict[int, str] = dict(
            conn.execute(text("SELECT seq, content FROM turns WHERE session_id = :p"), {"p": pk}).all()
        )
        files = conn.execute(
            text("SELECT ref, data FROM files WHERE session_id = :p AND kind = 'offload'"), {"p": pk}
        )
        offloaded = {ref: decompress(data) for ref, data in files.all()}
    out = {}
    for sid, rng in seqs.items():
        own = "\n".join(turns.get(q, "") for q in rng)
        joined = "".join(_texts(json.loads(turns[q])) for q in rng if q in turns)
        out[sid] = "\n".join([own, joined, *(body for ref, body in offloaded.items() if ref in own)])
    return out


def _texts(value: Any) -> str:
    """The strings of a stored turn's blocks, joined as they read (text, tool inputs and results)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(map(_texts, value))
    if isinstance(value, dict):
        return "".join(_texts(v) for k, v in value.items() if k not in ("type", "id", "tool_use_id", "name"))
    return ""


def attribute(
    found: dict[str, set[str]], needles: dict[str, set[str]], stored: dict[str, str]
) -> dict[str, list[str]]:
    """sample id -> the places its secret was found in. Samples share needles (the corpus repeats
    example keys), so a needle is charged to the samples whose own stored turns hold it; one that
    no sample's turns hold (it leaked later: a summary, a log) to every sample it stands for."""
    own = _hits({sid: stored.get(sid, "") for sid in needles}, set(found))  # one pass for all samples
    holders = {w: {sid for sid in sids if w in needles[sid]} for w, sids in own.items()}
    charged: dict[str, set[str]] = {sid: set() for sid in needles}
    for w, where in found.items():
        for sid in holders.get(w) or {sid for sid, ws in needles.items() if w in ws}:
            charged[sid] |= where
    return {sid: sorted(places) for sid, places in charged.items()}


def test_a_shared_needle_is_charged_to_the_sample_that_stored_it() -> None:
    needles = {"a": {"KEY12345ab"}, "b": {"KEY12345ab"}, "c": {"zz99ZZ99zz"}}
    found = {"KEY12345ab": {"database", "logs"}, "zz99ZZ99zz": {"summarizer"}}
    stored = {"a": "[REDACTED:key:00000000]", "b": "KEY12345ab", "c": "[REDACTED:key:11111111]"}
    assert attribute(found, needles, stored) == {"a": [], "b": ["database", "logs"], "c": ["summarizer"]}
    assert attribute(found, needles, {"a": "", "b": "", "c": ""})["a"] == ["database", "logs"]


def create_app_for(settings: Any) -> Any:
    from api.http.app import create_app

    return create_app(settings)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _plant_all(mkdir: Any) -> dict[tuple[str, str], dict[str, list[str]]]:
    return {(p, e): _plant_one(p, e, mkdir(f"{p}-{e}")) for p in PROFILES for e in ENCODINGS}


def _plant_one(profile: str, encoding: str, tmp: Path) -> dict[str, list[str]]:
    with FakeMessagesAPI(default=reply("## Task\nAudit.\n\n## Next planned action\nGo on.")) as api:
        return _plant(profile, encoding, tmp, api)


def _known() -> dict[str, dict[str, dict[str, str]]]:
    return json.loads(KNOWN_LEAKS.read_text()) if KNOWN_LEAKS.exists() else {}


def listed_leaks(profile: str, encoding: str) -> dict[str, str]:
    """sample id -> why it leaks, for the samples the profile is known to let through in this
    encoding (never any under the strict profile)."""
    return {} if profile == "strict" else _known().get(profile, {}).get(encoding, {})


def leak_report(found: dict[str, list[str]], listed: dict[str, str]) -> list[str]:
    """One line per sample that breaks the rule: a leak not listed, or a listed leak that no longer
    leaks (the list must shrink when a fix lands). Listed ids that are no sample are not judged."""
    by_id = {s.id: s for s in SAMPLES}
    out = [
        f"leaks: {sid} ({by_id[sid].rule_id if sid in by_id else '?'}) found in {', '.join(where)}"
        for sid, where in sorted(found.items())
        if where and sid not in listed
    ]
    out += [
        f"listed but no longer leaks: {sid} (drop it from {KNOWN_LEAKS.name})"
        for sid in sorted(listed)
        if sid in found and not found[sid]
    ]
    return out


def test_a_leak_report_names_new_leaks_and_fixed_listed_ones() -> None:
    """An unlisted leak and a listed sample that stopped leaking are both reported; a listed leak is not."""
    found = {"a": ["logs"], "b": [], "c": ["database"], "d": []}
    assert leak_report(found, {"c": "why", "d": "why", "zz": "why"}) == [
        "leaks: a (?) found in logs",
        f"listed but no longer leaks: d (drop it from {KNOWN_LEAKS.name})",
    ]
    assert leak_report({"a": [], "c": ["redis"]}, {"c": "why"}) == []


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_planted_samples_appear_nowhere(tmp_path: Path, encoding: str) -> None:
    """Every sample's secret, and every 8-character window of it, is in no place the service keeps
    or sends, except the standard profile's listed leaks, which must still leak. (The strict
    profile: test_planted_corpus_strict.py, a file of its own so that `make test` runs the two
    profiles side by side.)"""
    check_planted(tmp_path, "standard", encoding)


def check_planted(tmp_path: Path, profile: str, encoding: str) -> None:
    """Plant every sample under `profile` and `encoding`; fail listing every leak not listed, and
    every listed leak that no longer leaks."""
    require(bool(SAMPLES), f"needs the shared data: no secret samples under {data_dir() / 'secrets'}")
    require(answers("127.0.0.1", 6379), "Redis not answering on 127.0.0.1:6379 (run `make services`)")
    found = _plant_one(profile, encoding, tmp_path)
    assert found.keys() == {s.id for s in SAMPLES}
    report = leak_report(found, listed_leaks(profile, encoding))
    assert not report, f"{profile}/{encoding}: {len(report)} of {len(SAMPLES)} samples\n" + "\n".join(report)


def test_only_samples_that_name_no_secret_are_left_out() -> None:
    """A rule in _NO_CREDENTIAL names no secret in any of its positive samples, and its samples hold
    nothing a credential could be: the exclusion cannot hide a planted credential."""
    require(bool(SAMPLES), f"needs the shared data: no secret samples under {data_dir() / 'secrets'}")
    rows = [
        json.loads(line)
        for path in sorted((data_dir() / "secrets").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    left_out = [r for r in rows if r.get("label") == "positive" and r["rule_id"] in _NO_CREDENTIAL]
    assert left_out, "a listed rule has no positive sample: drop it from _NO_CREDENTIAL"
    for row in left_out:
        assert not row.get("expected_secret"), row["id"]
        assert re.fullmatch(r'"type": "service_account"', row["text"]), row["text"]


def test_the_strict_profile_lists_no_leak() -> None:
    """Under the strict profile every planted sample must appear nowhere: no known leak is allowed
    (a sample it lets through fails test_planted_samples_appear_nowhere and cannot be listed)."""
    assert not any(_known().get("strict", {}).values())


def _reason(profile: str, encoding: str, sample: Sample, leaks_plain: bool) -> str:
    if profile == "strict":
        return "the strict profile does not take this sample"
    if not sample.in_policy:
        return (
            "out of policy: an identifier or a placeholder, not a credential (ops/bench/secrets_scoring.py)"
        )
    if is_reference(needle_secret(sample)) or is_placeholder(needle_secret(sample)):
        return (
            "a reference or placeholder (`$Password`, `%nothing%`, `SOME_PASSWORD`, `${...}`), "
            "left as is by policy (is_reference, is_placeholder)"
        )
    if encoding == "plain" or leaks_plain:
        return "the redactor does not detect this sample (held-out recall ~0.7, BENCHMARKS.md 'Secret redaction')"
    return {
        "base64": "not detected base64-encoded: base64 is decoded only in document sources, not inside text",
        "percent": "not detected percent-encoded: the escaped `=`, `:` and quotes hide the context its rule needs",
        "json": "not detected JSON-escaped inside text: the escaped quotes and newlines hide its context",
        "split": "split across two turns: not detected in the two turns' texts joined either",
        "split_appends": "split across two appends: not detected in the two turns' texts joined either",
        "offloaded": "not detected inside a large output next to unrelated lines",
        "tool_input": "not detected as a tool-call input value",
    }[encoding]


if __name__ == "__main__":
    # Regenerate planted_corpus_leaks.json: python -m tests.integration.test_planted_corpus
    import tempfile

    results = _plant_all(lambda name: Path(tempfile.mkdtemp(prefix=f"corpus-{name}-")))
    by_id = {s.id: s for s in SAMPLES}
    known: dict[str, dict[str, dict[str, str]]] = {p: {} for p in PROFILES}
    for (profile, enc), res in results.items():
        plain = results[profile, "plain"]
        known[profile][enc] = {
            sid: f"{_reason(profile, enc, by_id[sid], bool(plain[sid]))}; found in {', '.join(where)}"
            for sid, where in sorted(res.items())
            if where
        }
    KNOWN_LEAKS.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    print({p: {enc: len(v) for enc, v in by.items()} for p, by in known.items()}, "of", len(SAMPLES))
