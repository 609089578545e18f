"""What any compaction policy could reach on a session (issue 27, part 4): the fewest epochs and
the largest share of fetches that keep the previous prompt's cached prefix.

Run: python -m ops.bench.bound [--sessions fa812bfe,...] [--windows 200000,64000,32000]

A fetch keeps the previous prefix when its prompt starts, block for block, with the previous
prompt through that prompt's last breakpoint (`pricing.keeps_prefix`). The previous fetch marks
its newest message, so a new epoch (any rewrite of a turn already sent) loses it once; between
epochs the prompt only grows. The turns a fetch brings (the agent's last answer and what came
back) must be sent once in full, so the prompt grows by them; it must stay within the budget; and
a rewrite cannot go below a floor. Rewriting as late as possible and down to the floor every time
needs the fewest epochs (`fewest_epochs`), so no policy keeps the prefix on more than
1 - fewest / (fetches - 1) of the fetches after the first.

Floors, each a bound for the policies that keep at least that much:
- `any`: the whole budget for the prompt; floor: the system prompt and the task (the first user
  message). Nothing else kept: no notes, no recent turns, no memory.
- `service`: the budget less the memory note's room (600) and the memory block at its budget;
  floor: system prompt, task and the keep window (`keep_share` of the budget, verbatim; it
  holds the fetch's new turns, so the floor is base + max(keep window, new turns)).
- `+notes`: `service` with handoff notes of `notes_share` of the budget kept too (today's notes
  grow to about this at 32k; a fold-up writes them within `notes_max_share`, and they stack up
  to `notes_stack_share`).
A fetch whose new turns alone pass the budget over the floor makes the bound unreachable ("no").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ops.bench.common import data_dir, table
from ops.bench.policy import SESSIONS
from worker.compaction.model import Policy, Turn
from worker.compaction.tokens import count_text
from worker.ingest import ingest
from worker.redaction import Redactor

NOTES_SHARE = 0.15


def new_tokens(turns: Sequence[Turn]) -> list[int]:
    """Per fetch (one before every assistant turn), the tokens of the turns it is the first to send."""
    out, sent = [], 0
    for i in range(len(turns) - 1):
        if turns[i + 1].role == "assistant":
            out.append(sum(t.tokens for t in turns[sent : i + 1]))
            sent = i + 1
    return out


def fewest_epochs(new: Sequence[int], budget: int, floor: int, keep: int = 0) -> int | None:
    """The fewest rewrites that keep every fetch within `budget` when each fetch adds `new[k]`
    tokens and a rewrite leaves `floor` plus the newest `keep` tokens, which hold that fetch's new
    tokens (so at least those; None: some fetch cannot fit).
    Greedy is optimal: a rewrite as late as possible leaves the same state as an earlier one."""
    prompt, epochs = 0, 0
    for n in new:
        if prompt + n <= budget:
            prompt += n
            continue
        epochs, prompt = epochs + 1, floor + max(keep, n)
        if prompt > budget:
            return None
    return epochs


def bound(turns: Sequence[Turn], system_tokens: int, policy: Policy) -> dict[str, Any]:
    """The fewest epochs and the best share of fetches keeping the previous prefix, per floor."""
    new = new_tokens(turns)
    if new:
        new[0] += system_tokens
    budget, task = policy.budget_tokens, turns[0].tokens if turns else 0
    service = budget - policy.memory_budget_tokens
    base = system_tokens + task
    floors = {  # room, floor, the newest tokens kept verbatim (the keep window holds the new turns)
        "any": (budget, base, 0),
        "service": (service, base, policy.keep_tokens),
        "+notes": (service, base + int(budget * NOTES_SHARE), policy.keep_tokens),
    }
    pairs = max(1, len(new) - 1)
    row: dict[str, Any] = {"fetches": len(new), "new_tokens": sum(new), "max_new": max(new, default=0)}
    for name, (room, floor, keep) in floors.items():
        epochs = fewest_epochs(new, room, floor, keep)
        row[f"epochs_{name}"] = "no" if epochs is None else epochs
        row[f"prefix_{name}"] = "no" if epochs is None else round(1 - epochs / pairs, 3)
    return row


COLUMNS = [
    "session",
    "window",
    "fetches",
    "new_tokens",
    "max_new",
    "epochs_any",
    "prefix_any",
    "epochs_service",
    "prefix_service",
    "epochs_+notes",
    "prefix_+notes",
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", default="fa812bfe,258c7280,medium,258c7280x2,gen1,gen2")
    parser.add_argument("--windows", default="200000,64000,32000")
    args = parser.parse_args(argv or [])
    root, rows = data_dir(), []
    for session in args.sessions.split(","):
        system, messages, _ = SESSIONS[session](root)
        for window in (int(w) for w in args.windows.split(",")):
            policy = Policy().for_window(window)
            turns = ingest(messages, first_seq=1, redactor=Redactor(b"replay"), policy=policy).turns
            rows.append({"session": session, "window": window, **bound(turns, count_text(system), policy)})
    print(table(rows, COLUMNS))
    return {"rows": rows}


if __name__ == "__main__":
    main(sys.argv[1:])
