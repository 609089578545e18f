"""The engine's invariants on every real transcript in ../shared/data, at a large and a small window."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import data_params, transcript_files
from worker.compaction.assemble import assemble
from worker.compaction.model import Policy, Transcript, canonical_json
from worker.compaction.pipeline import compact
from worker.compaction.tokens import count_request
from worker.compaction.validate import request_problems
from worker.ingest import ingest
from worker.redaction import Redactor

FILES = transcript_files()
LONG = [p for p in FILES if p.name.startswith(("fa812bfe", "258c7280")) and p.parent.name == "spotter"]


def compacted(path: Path, window: int) -> tuple[Transcript, Transcript, Policy]:
    from worker.compaction.formats import load_transcript

    imported = load_transcript(path)
    policy = Policy(context_window=window)
    ingested = ingest(imported.messages, first_seq=1, redactor=Redactor(b"k"), policy=policy)
    t = Transcript(imported.system, ingested.turns)
    return t, compact(t, policy, summarize=True).transcript, policy


@pytest.mark.data
@pytest.mark.parametrize("window", [200_000, 32_000])
@pytest.mark.parametrize("path", data_params(FILES), ids=lambda p: p.name[:40])
def test_real_transcript_invariants(shared_data: Path, path: Path, window: int) -> None:
    """Valid, complete, idempotent, deterministic and never larger, on real agent sessions."""
    t, out, policy = compacted(path, window)
    request = assemble(out)
    assert request_problems(request, allow_pending_tool_use=True) == []
    kept = {x.seq for x in out.turns}
    assert all(x.seq in kept or (out.handoff and out.handoff.covers(x.seq)) for x in t.turns)
    assert out.tokens() <= t.tokens()
    again = compact(out, policy, summarize=True).transcript
    assert canonical_json(assemble(again)) == canonical_json(request)
    thinking_before = {orjson.dumps(b) for x in t.turns for b in x.content if b["type"] == "thinking"}
    assert all(
        orjson.dumps(b) in thinking_before for x in out.turns for b in x.content if b["type"] == "thinking"
    )


@pytest.mark.data
@pytest.mark.parametrize("path", data_params(LONG), ids=lambda p: p.name[:8])
def test_long_sessions_fit_a_32k_window(shared_data: Path, path: Path) -> None:
    """The two long Claude Code sessions are served within a 32k window's budget."""
    _, out, policy = compacted(path, 32_000)
    assert count_request(assemble(out)) <= policy.budget_tokens


def test_the_long_sessions_are_present_when_data_is() -> None:
    """Guard: if the data folder exists, both long sessions were found (else the tests above prove nothing)."""
    if FILES:
        assert len(LONG) == 2
