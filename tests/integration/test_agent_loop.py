"""The loop helper: a scripted tool-using agent (the real `anthropic` SDK against FakeMessagesAPI)
with a real compactd API and worker in the middle."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import anthropic
import pytest
from compactd_client import AsyncCompactd, Compactd, RetryPolicy
from compactd_client.agent import ToolOutput, arun_agent, run_agent

from tests.fakes.messages_api import FakeMessagesAPI, reply, tool_call
from tests.integration.conftest import Service

pytestmark = [pytest.mark.services]

BASH = {"name": "bash", "description": "run a shell command", "input_schema": {"type": "object"}}
LS = {"name": "ls", "description": "list files", "input_schema": {"type": "object"}}
OUTPUT = (
    "\n".join(f"tests/test_{i}.py::test_case PASSED" for i in range(1, 150)) + "\nFAILED tests/test_150.py"
)


def _texts(body: Any) -> str:
    return str(body["messages"])


def test_the_loop_answers_compactds_tools_itself_and_stores_every_turn(service: Service) -> None:
    sid = f"agent-{uuid.uuid4().hex[:8]}"
    cpd = Compactd(
        service.url, service.key, model="claude-sonnet-4-6", max_tokens=512, retry=RetryPolicy(base=0.05)
    )
    seen: list[tuple[str, dict[str, Any]]] = []

    with FakeMessagesAPI() as fake:
        fake.script(tool_call("bash", {"cmd": "pytest"}, tool_id="toolu_01", text="Running the tests."))
        fake.script(tool_call("ls", {}, tool_id="toolu_02"))

        def my_tool(name: str, args: dict[str, Any]) -> str | ToolOutput:
            seen.append((name, args))
            if name == "bash":
                return OUTPUT  # over the offload threshold: compactd keeps a preview and a file
            # the model "saw" the offload marker: it reads the file back, then updates its memory
            (file,) = cpd.files(sid)
            fake.script(
                tool_call(
                    "read_file", {"ref": file["ref"], "start_line": 149, "end_line": 150}, tool_id="toolu_03"
                ),
                tool_call(
                    "update_working_memory",
                    {
                        "ops": [
                            {"op": "add", "section": "blockers", "key": "pytest", "value": "test_150 fails"}
                        ]
                    },
                    tool_id="toolu_04",
                ),
                reply("test_150 fails; the rest pass."),
            )
            return ToolOutput(f"{file['ref']} ...", is_error=False)

        model = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0)
        run = run_agent(
            model,
            cpd,
            sid,
            task="Which test fails?",
            system="You are a test agent.",
            tools=[BASH, LS],
            call_tool=my_tool,
        )
        bodies = fake.bodies
        model.close()

    assert (run.stop_reason, run.model_calls, run.text) == ("end_turn", 5, "test_150 fails; the rest pass.")
    assert run.tool_calls == ["bash", "ls", "read_file", "update_working_memory"]
    # compactd's own tools never reached the caller's function
    assert [name for name, _ in seen] == ["bash", "ls"]
    # every model request was compactd's prompt: its system, the caller's tools then compactd's
    for body in bodies:
        assert "You are a test agent." in str(body["system"])
        assert [t["name"] for t in body["tools"]] == [
            "bash",
            "ls",
            "read_file",
            "grep",
            "update_working_memory",
        ]
        assert body["model"] == "claude-sonnet-4-6" and body["max_tokens"] == 512
    # the bash output reached the model offloaded (a preview naming the file), not whole
    assert "FAILED tests/test_150.py" not in _texts(bodies[1])
    # read_file was answered by compactd with the file's lines, grep-free
    read = bodies[3]["messages"][-1]["content"][0]
    assert read["tool_use_id"] == "toolu_03" and "FAILED tests/test_150.py" in str(read["content"])
    memory_result = bodies[4]["messages"][-1]["content"][0]
    assert memory_result["tool_use_id"] == "toolu_04" and "test_150 fails" in str(memory_result["content"])
    assert [i.value for i in cpd.memory(sid).sections["blockers"]] == ["test_150 fails"]

    # the session holds every turn: the task, 5 responses and 4 tool results, in order
    served = cpd.fetch_prompt(sid)
    assert served.version == 10
    roles = [m["role"] for m in served.messages]
    assert roles == ["user", "assistant"] * 5
    used = [
        b["id"]
        for m in served.messages
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    answered = [
        b["tool_use_id"]
        for m in served.messages
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert used == answered == ["toolu_01", "toolu_02", "toolu_03", "toolu_04"]
    assert served.messages[-1]["content"][0]["text"] == "test_150 fails; the rest pass."
    cpd.close()


def test_the_async_loop_with_an_async_tool(service: Service) -> None:
    sid = f"agent-{uuid.uuid4().hex[:8]}"
    calls: list[str] = []

    async def my_tool(name: str, args: dict[str, Any]) -> str:
        calls.append(name)
        return "3 files"

    async def scenario() -> None:
        with FakeMessagesAPI() as fake:
            fake.script(
                tool_call("ls", {}, tool_id="toolu_a1"),
                tool_call("grep", {"ref": "f_missing", "pattern": "x"}, tool_id="toolu_a2"),
                reply("done"),
            )
            async with AsyncCompactd(service.url, service.key, model="claude-haiku-4-5") as cpd:
                model = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=0)
                run = await arun_agent(model, cpd, sid, task="count files", tools=[LS], call_tool=my_tool)
                await model.close()
                assert (run.text, run.model_calls) == ("done", 3)
                # a read of an unknown file is the model's error to see, not an exception
                refused = fake.bodies[2]["messages"][-1]["content"][0]
                assert refused["is_error"] is True and "no such file" in str(refused["content"])
                assert (await cpd.fetch_prompt(sid)).version == 6

    asyncio.run(scenario())
    assert calls == ["ls"]
