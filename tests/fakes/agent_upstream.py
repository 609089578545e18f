"""A scripted model that drives an agent through a long shell session, on the OpenAI stand-in
(tests/fakes/openai_api.py, which checks every request: tool pairing, the window with
`context_length_exceeded`, preserved reasoning): the Codex CLI on the Responses API
(tests/e2e/test_codex.py, `codex_upstream`) and mini-swe-agent on Chat Completions
(tests/integration/test_openai_agents.py, `chat_upstream`).

Each request is answered from what it carries, not from a script: the newest `exec_command` output
says which round comes next, so compaction on the way (clipped, offloaded and summarized history)
never confuses it. Round r asks Codex to run a command printing `output_lines(r)` numbered lines
(~8 KB; every third round ~16 KB); after the last round it answers with text. Once, after
`read_after` rounds, when the prompt shows an offloaded output (`[compactd: offloaded ... read_file
ref=f_...]`), it calls compactd's `read_file` on that output's last lines and checks, in the next
request, that the result holds them (`reads`). A request that carries Codex's own compaction prompt
is a failure: compactd keeps the window, Codex never has to.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.openai_api import OpenAIStandIn, Reply, input_items, reply

LINE = "round {r:03d} line %04g: checked module parser_{r:03d} against the fixture set, status ok, 12 assertions passed"
OFFLOADED = re.compile(
    r"\[compactd: offloaded; only the start is shown\..*?read_file ref=(f_[0-9a-f]{16})", re.S
)
ROUND = re.compile(r"round (\d{3}) line 0001:")
# a round's command as a summary lists it (after a client's own compaction: where the work stands)
COMMAND_ROUND = re.compile(r"round (\d{3}) line %04g")
# what Codex's own compaction request says (its summarization prompt, codex-rs/core/templates)
CLIENT_COMPACTION = ("CONTEXT CHECKPOINT COMPACTION", "memento", "handoff summary for another LLM")


def output_lines(r: int) -> int:
    """Lines round r's command prints: ~8 KB, every third round ~16 KB."""
    return 170 if r % 3 == 0 else 85


def command(r: int) -> str:
    return f"seq -f '{LINE.format(r=r)}' 1 {output_lines(r)}"


def expected_line(r: int, n: int) -> str:
    return LINE.format(r=r) % n


@dataclass
class Read:
    ref: str
    round: int
    start_line: int
    end_line: int
    ok: bool | None = None


@dataclass
class Driver:
    """Decides each reply; what it saw is kept for the test."""

    rounds: int = 60
    read_after: int = 20
    reads: list[Read] = field(default_factory=list)
    compaction_requests: int = 0
    newest_reasoning: list[bool] = field(default_factory=list)  # per request after the first
    lock: threading.Lock = field(default_factory=threading.Lock)

    tool: str = "exec_command"  # the client's shell tool
    read_with: str = "read_file"  # or grep: how the model reads an offloaded output back
    finish: str | None = None  # a command that ends the run (else a text answer)

    def __call__(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self.lock:
            return self.decide(body if "input" in body else {"input": chat_items(body)})

    def decide(self, body: dict[str, Any]) -> Reply:
        items = input_items(body)
        text = json.dumps(items)
        if any(mark in text for mark in CLIENT_COMPACTION):
            self.compaction_requests += 1
            return reply("Summary: the checks are running round by round.")
        calls = {i.get("call_id"): i for i in items if i.get("type") == "function_call"}
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        if not outputs and not COMMAND_ROUND.search(text):
            return self.exec_round(1)
        last = outputs[-1] if outputs else {}
        call = calls.get(last.get("call_id"), {})
        if call.get("name") in ("read_file", "grep") and self.reads and self.reads[-1].ok is None:
            self.check_read(self.reads[-1], str(last.get("output", "")))
        done = [int(m.group(1)) for o in outputs if (m := ROUND.search(str(o.get("output", ""))))]
        summarized = [
            int(x) for i in items if i.get("type") == "message" for x in COMMAND_ROUND.findall(json.dumps(i))
        ]
        r = max(done + summarized, default=0)
        if r >= self.rounds:
            if self.finish is not None and call.get("name") == self.tool and self.finish not in str(call):
                return reply(calls=[(self.tool, {"command": self.finish})])
            return reply(f"All {self.rounds} rounds passed.")
        if r >= self.read_after and not self.reads and (read := self.read_for(text)) is not None:
            self.reads.append(read)
            if self.read_with == "grep":  # an output that is not line by line (mini-swe-agent's JSON)
                pattern = f"round {read.round:03d} line {output_lines(read.round):04d}"
                return reply(calls=[("grep", {"ref": read.ref, "pattern": pattern})])
            args = {"ref": read.ref, "start_line": read.start_line, "end_line": read.end_line}
            return reply(calls=[("read_file", args)])
        return self.exec_round(r + 1)

    def exec_round(self, r: int) -> Reply:
        if self.tool == "exec_command":
            args = {"cmd": command(r), "yield_time_ms": 10000, "max_output_tokens": 12000}
            return reply(calls=[("exec_command", args)])
        return reply(f"Round {r}.", calls=[(self.tool, {"command": command(r)})])

    def read_for(self, text: str) -> Read | None:
        """A read of the last lines of the newest offloaded output the prompt shows."""
        found = [
            (m.group(1), text[m.start() - 4000 : m.start()])
            for m in OFFLOADED.finditer(text.replace("\\n", "\n"))
        ]
        for ref, before in reversed(found):
            rounds = ROUND.findall(before)
            if rounds:
                r = int(rounds[-1])
                n = output_lines(r)
                # the file is the output as Codex sent it: a few lines of Codex's own before the first
                return Read(ref, r, n - 5, n + 10)
        return None

    def check_read(self, read: Read, output: str) -> None:
        n = output_lines(read.round)
        wanted = (n,) if self.read_with == "grep" else (n - 2, n - 1, n)
        read.ok = all(expected_line(read.round, k) in output for k in wanted)


def chat_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat request's messages as Responses items (calls and outputs), for the same driver."""
    items: list[dict[str, Any]] = []
    for m in body.get("messages") or []:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            )
        if m.get("role") == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m.get("content")}
            )
        elif not m.get("tool_calls"):
            items.append({"type": "message", "role": m.get("role"), "content": m.get("content")})
    return items


def codex_upstream(
    context_window: int, rounds: int = 60, read_after: int = 20
) -> tuple[OpenAIStandIn, Driver]:
    driver = Driver(rounds=rounds, read_after=read_after)
    return OpenAIStandIn(context_window=context_window, responder=driver), driver


def chat_upstream(
    context_window: int, rounds: int, read_after: int, finish: str
) -> tuple[OpenAIStandIn, Driver]:
    """A Chat Completions model for an agent whose shell tool is `bash` ({"command": ...}) and that
    ends when it runs `finish` (mini-swe-agent's submit command); it reads back with compactd's grep."""
    driver = Driver(rounds=rounds, read_after=read_after, tool="bash", read_with="grep", finish=finish)
    return OpenAIStandIn(context_window=context_window, responder=driver), driver
