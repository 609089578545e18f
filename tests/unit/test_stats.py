"""Session statistics (worker/session_stats.py) and their terminal rendering (api/cli/stats.py): pure."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from api.cli.stats import BARS, render_stats, sparkline
from worker.compaction.model import Transcript, Turn
from worker.compaction.offload import Offload
from worker.compaction.tokens import count_message
from worker.session_stats import (
    FileRow,
    Publish,
    TurnRow,
    applicable,
    count_redactions,
    epoch_marks,
    per_turn,
    produced_tokens,
    session_stats,
    snapshot_kind,
)


def turns(*tokens: int) -> list[TurnRow]:
    return [TurnRow(i + 1, "user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(tokens)]


def test_before_any_snapshot_the_prompt_is_the_history_so_far() -> None:
    """Without a publish, the served size after each turn is the running sum of turn tokens."""
    curve = per_turn(turns(10, 20, 30), [])
    assert [p["prompt_tokens"] for p in curve] == [10, 30, 60]
    assert [p["raw_tokens"] for p in curve] == [10, 30, 60]
    assert {p["epoch"] for p in curve} == {0}


def test_after_a_snapshot_the_prompt_is_the_snapshot_plus_the_turns_since() -> None:
    """A snapshot through turn 3 of 25 tokens serves turn 3 at 25 and turn 4 at 25 + its tokens."""
    curve = per_turn(turns(10, 20, 30, 40), [Publish(1, 3, 25, "structural")])
    assert [p["prompt_tokens"] for p in curve] == [10, 30, 25, 65]
    assert [p["epoch"] for p in curve] == [0, 0, 1, 1]


def test_the_newest_epoch_wins_over_a_later_through_of_an_older_epoch() -> None:
    """Snapshots are ordered by (epoch, through_seq), as the store's latest_snapshot orders them."""
    pubs = [Publish(1, 3, 50, "structural"), Publish(2, 2, 5, "summary")]
    assert applicable(pubs, 3) == Publish(2, 2, 5, "summary")
    assert per_turn(turns(10, 20, 30), pubs)[-1]["prompt_tokens"] == 5 + 30


def test_epoch_marks_name_the_first_publish_of_each_epoch() -> None:
    """Extensions within an epoch are not marks; epoch 0 is not a compaction."""
    pubs = [
        Publish(0, 2, 30, "extend"),
        Publish(1, 5, 40, "structural"),
        Publish(1, 7, 60, "extend"),
        Publish(2, 9, 20, "summary"),
    ]
    assert epoch_marks(pubs) == [
        {"epoch": 1, "at_turn": 5, "kind": "structural", "tokens": 40},
        {"epoch": 2, "at_turn": 9, "kind": "summary", "tokens": 20},
    ]


def test_snapshot_kind_from_the_decision_and_the_switch() -> None:
    """A switch or a changed handoff is a summary; a new epoch otherwise is structural."""
    assert snapshot_kind("new_epoch", "quiet") == "summary"
    assert snapshot_kind("new_epoch", "", summarized=True) == "summary"
    assert snapshot_kind("new_epoch", "") == "structural"
    assert snapshot_kind("extend", "") == "extend"
    assert snapshot_kind("skip", "") == "extend"


def test_redactions_are_counted_by_kind_without_values() -> None:
    """Placeholders are counted per kind; look-alikes without the 8 hex digits are not."""
    texts = [
        '{"text": "key [REDACTED:aws_access_key:3f9a1c02] and [REDACTED:aws_access_key:00aa11bb]"}',
        "[REDACTED:github_token:deadbeef] [REDACTED:nope:xyz]",
    ]
    assert count_redactions(texts) == {"aws_access_key": 2, "github_token": 1}


def test_session_stats_carries_every_number_the_inspector_shows() -> None:
    """Ratio is raw over served; files read are those with a logged read."""
    stats = session_stats(
        "s1",
        turns(100, 100, 100, 100),
        [Publish(1, 3, 50, "structural")],
        budget_tokens=1000,
        memory_items=3,
        files=[
            FileRow("f_0123456789abcdef", "offload", 10, ("lines 1-5",)),
            FileRow("h_1", "archive", 2, ()),
        ],
        redactions={"password": 1},
    )
    assert stats["raw_tokens"] == 400 and stats["served_tokens"] == 150
    assert stats["compaction_ratio"] == 2.67
    assert stats["turns"] == 4 and stats["epoch"] == 1 and stats["files_read"] == 1
    assert stats["redactions"] == {"password": 1} and stats["memory_items"] == 3


token_lists = st.lists(st.integers(0, 5_000), min_size=1, max_size=60)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[TurnRow], list[Publish]]:
    ts = turns(*draw(token_lists))
    n = len(ts)
    pubs = draw(
        st.lists(
            st.builds(
                Publish,
                st.integers(0, 5),
                st.integers(0, n),
                st.integers(0, 10_000),
                st.sampled_from(["structural", "summary", "extend"]),
            ),
            max_size=12,
        )
    )
    return ts, pubs


@given(histories(), st.integers(1, 20_000))
def test_per_turn_matches_its_definition(history: tuple[list[TurnRow], list[Publish]], budget: int) -> None:
    """The linear sweep's pressure equals, turn by turn, the applicable snapshot plus the turns after
    it; what a fetch serves is that, capped at the budget (a fallback past it), never above."""
    ts, pubs = history
    curve = per_turn(ts, pubs, budget)
    for point in curve:
        snap = applicable(pubs, point["seq"])
        since = sum(t.tokens for t in ts if (snap.through_seq if snap else 0) < t.seq <= point["seq"])
        assert point["pressure_tokens"] == (snap.tokens if snap else 0) + since
        assert point["prompt_tokens"] == min(point["pressure_tokens"], budget) <= budget
        assert point["fallback"] == (point["pressure_tokens"] > budget)
        assert point["raw_tokens"] == sum(t.tokens for t in ts if t.seq <= point["seq"])
    assert [p["seq"] for p in curve] == [t.seq for t in ts]


@given(st.lists(st.floats(0, 1e7, allow_nan=False), max_size=500), st.integers(1, 120))
def test_sparkline_is_bounded_and_uses_only_bars(values: list[float], width: int) -> None:
    """At most `width` bars, one per value when they fit, none outside ▁..█."""
    line = sparkline(values, width)
    assert len(line) == min(len(values), width)
    assert set(line) <= set(BARS)


def test_sparkline_shows_a_drop_at_compaction() -> None:
    """A curve rising through every level, then dropping, reads bar for bar."""
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7, 1], width=20) == "▁▂▃▄▅▆▇█▂"
    assert sparkline([1, 9, 2, 9], width=2) == "██"  # a bucket shows its peak
    assert sparkline([0, 0], width=5) == "▁▁"
    assert sparkline([50], width=5, top=100) == "▅"


def test_render_stats_is_a_table_with_the_curve() -> None:
    """Every number appears on its own labelled line; the curve line holds the sparkline."""
    stats = session_stats(
        "demo",
        turns(*([1000] * 30)),
        [Publish(1, 20, 3000, "summary")],
        budget_tokens=25_000,
        memory_items=2,
        files=[FileRow("h_00112233aabbccdd", "archive", 40, ())],
        redactions={"aws_access_key": 2},
    )
    text = render_stats(stats, width=30)
    rows = {line[:18].strip(): line[20:] for line in text.splitlines() if line[:1].strip()}
    assert rows["session"] == "demo" and rows["turns"] == "30" and rows["epoch"] == "1"
    assert rows["served tokens"] == "13,000 of 25,000 budget"
    assert rows["compaction ratio"] == "2.31x"
    assert rows["epochs"] == "1 at turn 20 (summary)"
    assert rows["redactions"] == "aws_access_key 2"
    assert rows["file"] == "h_00112233aabbccdd archive 40 lines: not read"
    bars = rows["prompt/turn"]
    assert len(bars) == 30 and set(bars) <= set(BARS)
    # the summary at turn 20 (20,000 uncompacted -> 3,000 served) shows as a drop
    assert BARS.index(bars[19]) < BARS.index(bars[18])


def test_an_offloaded_block_counts_whole_in_the_uncompacted_history() -> None:
    """A turn whose blocks were offloaded at ingest (a tool result, a text, a tool input) counts
    what the agent produced, read from each pointer; the served prompt counts what was stored."""
    big = "\n".join(f"line {n}: the output goes on and on" for n in range(3000))
    blocks = (
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": big},
        {"type": "text", "text": big + " and a text"},
        {"type": "tool_use", "id": "toolu_2", "name": "write", "input": {"content": big + " input"}},
    )
    whole = count_message(blocks)
    [stored] = Offload(1_000, 100)(Transcript("", (Turn(1, "user", blocks, whole),))).turns
    assert stored.tokens < whole / 10
    produced = produced_tokens(stored.tokens, orjson.dumps(list(stored.content)).decode())
    assert abs(produced - whole) < 0.01 * whole
    assert produced_tokens(42, orjson.dumps([{"type": "text", "text": "plain"}]).decode()) == 42
    # someone quoting a pointer's words without its ref is not an offload
    quoted = [
        {
            "type": "text",
            "text": "[compactd: offloaded; only the start is shown. The whole text is 9,999 tokens",
        }
    ]
    assert produced_tokens(42, orjson.dumps(quoted).decode()) == 42
    curve = per_turn([TurnRow(1, "user", stored.tokens, produced), TurnRow(2, "assistant", 10)], [])
    assert [p["raw_tokens"] for p in curve] == [produced, produced + 10]
    assert [p["prompt_tokens"] for p in curve] == [stored.tokens, stored.tokens + 10]
