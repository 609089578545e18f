"""A scripted agent to watch compaction happen, with no provider: an anthropic-SDK loop through compactd.

    .venv/bin/python -m tests.fakes.messages_api                  # 1: the model's stand-in (port 8790)
    COMPACTD_UPSTREAM_URL=http://127.0.0.1:8790 make up            # 2: compactd in front of it
    COMPACTD_KEY=cpd_... .venv/bin/python -m ops.demo_agent        # 3: this agent

It is an unchanged SDK agent, as in docs/proxy.md: its base URL is compactd (COMPACTD_URL, default
http://127.0.0.1:8700), its key a compactd key, and it keeps its whole history. Its one tool,
`read_log`, makes up a build log (~35 KB, every eighth ~230 KB, every seventh failing); the
stand-in asks for every build's log in turn, then searches what compactd moved out of the prompt
with compactd's own `grep` tool (answered inside the call) and names the failed builds. A small window
(`--context-window`, 24,000 tokens) makes compactd clip, offload and summarize within a minute:
each round prints the history the agent holds beside what compactd sent upstream for it, and the
end names the session to open in the inspector.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

READ_LOG: dict[str, Any] = {
    "name": "read_log",
    "description": "The full log of one build of the project, by build number.",
    "input_schema": {
        "type": "object",
        "properties": {"build": {"type": "integer", "minimum": 1}},
        "required": ["build"],
    },
}
SYSTEM = "You are a release engineer. Read every build log with read_log before you answer."


def build_log(build: int) -> str:
    """Build `build`'s log: about 35 KB, every eighth one about 230 KB (offloaded at ingest), a
    failure in every seventh, in the middle (where a clip cuts)."""
    lines = 4_000 if build % 8 == 0 else 600
    out = []
    for n in range(1, lines + 1):
        out.append(f"[build-{build} {n:05d}] compiling module_{n % 97:02d}.py ... ok ({(n * 37) % 900} ms)")
        if build % 7 == 0 and n == lines // 2:
            out.append(f"build-{build}: FAILED test_checkout_total (AssertionError: 402 != 200)")
    out.append(f"build-{build}: done")
    return "\n".join(out)


def run(url: str, key: str, session: str, rounds: int, window: int, pause_seconds: float) -> int:
    """The agent loop; prints a line per round. 0 when the model answered, 1 on an API error."""
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=2)
    headers = {"x-compactd-session": session, "x-compactd-context-window": str(window)}
    task = f"Read the logs of the {rounds} builds (read_log, build 1 to {rounds}) and tell me which failed."
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    held = len(task)
    try:
        while True:
            reply = client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=1024,
                system=SYSTEM,
                tools=[READ_LOG],  # type: ignore[list-item]
                messages=messages,  # type: ignore[arg-type]
                extra_headers=headers,
            )
            print(
                f"round {len(messages) // 2 + 1:>3}: the agent sent its whole history, ~{held // 4:,} tokens;"
                f" compactd sent ~{reply.usage.input_tokens:,} upstream",
                flush=True,
            )
            messages.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            )
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            results = []
            for call in calls:
                log = build_log(int(str(dict(call.input).get("build", 1))))
                held += len(log)
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": log})
            messages.append({"role": "user", "content": results})
            # the agent's own work between calls: the worker compacts meanwhile
            time.sleep(pause_seconds)
    except anthropic.APIStatusError as exc:
        print(f"demo: compactd answered {exc.status_code}: {exc.api_message or exc.body}", file=sys.stderr)
        return 1
    except anthropic.APIConnectionError:
        print(f"demo: nothing answers at {url} (is `make up` running? COMPACTD_URL)", file=sys.stderr)
        return 1
    finally:
        client.close()
    text = " ".join(b.text for b in reply.content if b.type == "text")
    print(f"the model: {text}")
    print(f"open {url}/ui, session {session!r}: its chart, epochs and the prompt compactd served")
    print(f"or: .venv/bin/compactd stats {session}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.demo_agent", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="builds to read (default %(default)s)")
    parser.add_argument("--context-window", type=int, default=24_000, help="tokens (default %(default)s)")
    parser.add_argument(
        "--pause", type=float, default=0.5, help="seconds between calls (default %(default)s)"
    )
    parser.add_argument("--session", default=f"demo-agent-{int(time.time())}")
    args = parser.parse_args(argv)
    key = os.environ.get("COMPACTD_KEY")
    if not key:
        print("demo: set COMPACTD_KEY to the key `make up` printed", file=sys.stderr)
        return 2
    url = os.environ.get("COMPACTD_URL", "http://127.0.0.1:8700")
    return run(url, key, args.session, args.rounds, args.context_window, args.pause)


if __name__ == "__main__":
    sys.exit(main())
