"""A Redactor remembers the texts it found clean (by digest) and skips their scan when they come
again; the results are those of a Redactor that remembers nothing."""

from __future__ import annotations

import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_redact_properties import WORDS, planted
from worker.metrics import CountingRedactor
from worker.redaction import Redactor, redact

KEY = b"clean-texts-key"


def _clean_text() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from([*WORDS, "Bash", "Read", "\n", "=", ":", "/tmp/x.py"]), max_size=12).map(
        " ".join
    )


def _secret_text() -> st.SearchStrategy[str]:
    return planted().map(lambda case: case[0] + case[1] + case[3])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_clean_text(), _secret_text()), min_size=1, max_size=8), st.data())
def test_a_remembering_redactor_redacts_as_a_fresh_one(texts: list[str], data: st.DataObject) -> None:
    """Texts with and without secrets, each sent several times in any order: every result is the
    one a new Redactor gives (a clean verdict is never reused for a text with a secret)."""
    order = data.draw(st.lists(st.sampled_from(texts), min_size=len(texts), max_size=3 * len(texts)))
    shared = Redactor(KEY)
    assert [shared.redact_text(t) for t in texts + order] == [
        Redactor(KEY).redact_text(t) for t in texts + order
    ]


def test_a_secret_is_redacted_and_counted_every_time_it_comes() -> None:
    """A text with a secret is scanned again each time (it is never remembered as clean)."""
    redactor = CountingRedactor.of(Redactor(KEY))
    text = "export GITHUB_TOKEN=ghp_Zq5kVr8m2XyW4nLbT7cJdF9hQs3aPe6uR1oK"
    outs = [redactor.redact_text(text) for _ in range(3)]
    assert len(set(outs)) == 1 and "ghp_" not in outs[0]
    assert sum(redactor.counts.values()) == 3


def test_only_digests_are_kept_and_counting_redactors_share_them() -> None:
    """What a Redactor remembers is 16-byte digests, never a text; a CountingRedactor made for one
    append (`CountingRedactor.of`) remembers into its Redactor's memory."""
    base = Redactor(KEY)
    counting = CountingRedactor.of(base)
    assert counting.clean._seen is base.clean._seen
    counting.redact_text("Bash tool ran: ls -la /tmp")
    seen = list(base.clean._seen)
    assert len(seen) == 1 and all(isinstance(d, bytes) and len(d) == 16 for d in seen)
    assert base.clean.digest(b"Bash tool ran: ls -la /tmp") in base.clean


def test_a_tenant_never_skips_a_scan_for_another_tenants_text() -> None:
    """Appends of two tenants share the memory's room but not its verdicts: a text one tenant sent
    is scanned again when another sends it (no timing tells a tenant what others sent)."""
    base = Redactor(KEY)
    first, second = CountingRedactor.of(base, b"tenant:1"), CountingRedactor.of(base, b"tenant:2")
    first.redact_text("Bash tool ran: ls -la /tmp")
    assert first.clean.digest(b"Bash tool ran: ls -la /tmp") in first.clean
    assert second.clean.digest(b"Bash tool ran: ls -la /tmp") not in second.clean
    second.redact_text("Bash tool ran: ls -la /tmp")
    assert len(base.clean._seen) == 2


def test_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its size the oldest digests go first."""
    monkeypatch.setattr(redact, "CLEAN_KEPT", 5)
    redactor = Redactor(KEY)
    for i in range(12):
        redactor.redact_text(f"step {i} done")
    assert len(redactor.clean._seen) == 5
    assert redactor.clean.digest(b"step 11 done") in redactor.clean
    assert redactor.clean.digest(b"step 0 done") not in redactor.clean


def test_threads_that_share_a_redactor_never_trip_over_its_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """API threads redact with one Redactor: forgetting the oldest digest while another thread adds
    one raises nothing (a dict changed between `iter` and `next` used to)."""
    monkeypatch.setattr(redact, "CLEAN_KEPT", 4)
    memory = redact.CleanTexts()
    errors: list[str] = []

    def add(k: int) -> None:
        try:
            for i in range(5_000):
                memory.add(memory.digest(b"%d-%d" % (k, i)))
        except Exception as exc:  # any error is the failure
            errors.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=add, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_a_scoped_redactor_shares_the_memory_not_the_verdicts() -> None:
    """`Redactor.scoped` (a tenant's system prompt, appends' redactors): the same bounded memory and
    rules, its digests keyed by the scope; the answer is the unscoped one's."""
    base = Redactor(KEY)
    prompt = "You are a coding agent. " * 40
    one, other = base.scoped(b"tenant:1"), base.scoped(b"tenant:2")
    assert one.redact_text(prompt) == prompt == base.redact_text(prompt)
    assert one.clean._seen is base.clean._seen and one.rules is base.rules and one.key == base.key
    assert one.clean.digest(prompt.encode()) in one.clean
    assert other.clean.digest(prompt.encode()) not in other.clean
