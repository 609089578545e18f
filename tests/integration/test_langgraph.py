"""The LangGraph hook and the LangChain middleware: a real graph whose ChatAnthropic talks to
FakeMessagesAPI, with a real compactd in the middle; the model request carries compactd's prompt."""

from __future__ import annotations

import uuid
from importlib.util import find_spec
from typing import Any

import pytest
from compactd_client import Compactd
from compactd_client.langgraph import CompactdHook, CompactdMiddleware, from_anthropic, to_anthropic

from tests.conftest import require
from tests.fakes.messages_api import FakeMessagesAPI, reply, tool_call
from tests.integration.conftest import Service

pytestmark = [pytest.mark.services]

# the optional extra `langgraph` (in the dev group, so CI has it)
HAVE_LANGGRAPH = all(find_spec(m) for m in ("langgraph", "langchain", "langchain_anthropic"))


@pytest.fixture(autouse=True)
def _langgraph_installed() -> None:
    require(HAVE_LANGGRAPH, "langgraph/langchain not installed (uv sync installs the dev group)")


SYSTEM = "You answer questions about the weather."


def _weather_tool() -> Any:
    from langchain_core.tools import tool

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return weather


def _model(fake: FakeMessagesAPI) -> Any:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(
        model="claude-sonnet-4-6", base_url=fake.base_url, api_key="test", max_retries=0, max_tokens=256
    )


def _check_requests(fake: FakeMessagesAPI, cpd: Compactd, sid: str) -> None:
    first, second = fake.bodies
    # compactd's system prompt and its breakpoint on the newest block: the model saw the served
    # prompt, not the state
    for body in (first, second):
        assert SYSTEM in str(body["system"])
        assert "cache_control" in body["messages"][-1]["content"][-1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    (call,) = [b for b in second["messages"][1]["content"] if b["type"] == "tool_use"]
    assert (call["id"], call["name"], call["input"]) == ("toolu_w1", "weather", {"city": "Oslo"})
    (result,) = [b for b in second["messages"][2]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_w1" and "sunny in Oslo" in str(result["content"])
    # the served system blocks went through unchanged, compactd's cache_control breakpoint included
    # (the worker may have added the observed working memory since: compare the system prompt
    # block's text; the breakpoint is on the last block, which that block was if none was added)
    assert second["system"][-1].get("cache_control") == {"type": "ephemeral"}
    unmarked = lambda b: {k: v for k, v in b.items() if k != "cache_control"}  # noqa: E731
    assert unmarked(second["system"][0]) == unmarked(cpd.fetch_prompt(sid).system[0])
    assert sum(SYSTEM in str(b) for b in second["system"]) == 1  # once: compactd's, not doubled
    # and compactd holds every turn, the final answer included
    served = cpd.fetch_prompt(sid)
    assert served.version == 4
    assert [m["role"] for m in served.messages] == ["user", "assistant", "user", "assistant"]
    assert "It is sunny in Oslo." in str(served.messages[-1]["content"])


@pytest.mark.filterwarnings(
    "ignore::DeprecationWarning"
)  # create_react_agent moved to langchain.agents in v1
def test_pre_model_hook_serves_compactds_prompt_to_an_unchanged_react_agent(service: Service) -> None:
    from langgraph.prebuilt import create_react_agent

    sid = f"lg-{uuid.uuid4().hex[:8]}"
    with FakeMessagesAPI() as fake, Compactd(service.url, service.key) as cpd:
        fake.script(tool_call("weather", {"city": "Oslo"}, tool_id="toolu_w1"), reply("It is sunny in Oslo."))
        hook = CompactdHook(cpd, model="claude-sonnet-4-6", system=SYSTEM)
        graph = create_react_agent(
            _model(fake),
            [_weather_tool()],
            pre_model_hook=hook.pre_model_hook,
            post_model_hook=hook.post_model_hook,
        )
        state = graph.invoke(
            {"messages": [("user", "Weather in Oslo?")]}, {"configurable": {"thread_id": sid}}
        )
        # the graph's own state is untouched: its four messages, nothing of compactd's
        assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
        assert "cache_control" not in str([m.content for m in state["messages"]])
        _check_requests(fake, cpd, sid)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_new_hook_continues_a_thread_without_appending_twice(service: Service) -> None:
    """A restarted process (a new hook, the graph's checkpointer keeping the thread) finds where it
    left off from the session's version: only the new messages are appended."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    sid = f"lg-{uuid.uuid4().hex[:8]}"
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": sid}}
    with FakeMessagesAPI() as fake, Compactd(service.url, service.key) as cpd:
        fake.script(reply("Sunny."), reply("Rain tomorrow."))
        for question in ("Weather in Oslo?", "And tomorrow?"):
            hook = CompactdHook(cpd, model="claude-sonnet-4-6", system=SYSTEM)  # a fresh one each time
            graph = create_react_agent(
                _model(fake), [_weather_tool()], pre_model_hook=hook.pre_model_hook, checkpointer=saver
            )
            state = graph.invoke({"messages": [("user", question)]}, config)
        assert [m.type for m in state["messages"]] == ["human", "ai", "human", "ai"]
        served = cpd.fetch_prompt(sid)
        # the last answer is appended at the next model call (no post_model_hook here)
        assert served.version == 3
        assert [m["role"] for m in served.messages] == ["user", "assistant", "user"]
        assert "And tomorrow?" in str(fake.bodies[1]["messages"][-1]["content"])


def test_middleware_serves_compactds_prompt_to_a_langchain_agent(service: Service) -> None:
    from langchain.agents import create_agent

    sid = f"mw-{uuid.uuid4().hex[:8]}"
    with FakeMessagesAPI() as fake, Compactd(service.url, service.key) as cpd:
        fake.script(tool_call("weather", {"city": "Oslo"}, tool_id="toolu_w1"), reply("It is sunny in Oslo."))
        agent = create_agent(
            _model(fake), [_weather_tool()], system_prompt=SYSTEM, middleware=[CompactdMiddleware(cpd, sid)]
        )
        state = agent.invoke({"messages": [("user", "Weather in Oslo?")]})
        assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
        _check_requests(fake, cpd, sid)


def test_messages_round_trip_between_langchain_and_anthropic_shapes() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    state = [
        SystemMessage("sys"),
        HumanMessage("q"),
        AIMessage(
            "",
            tool_calls=[{"name": "a", "args": {"x": 1}, "id": "t1"}, {"name": "b", "args": {}, "id": "t2"}],
        ),
        ToolMessage("one", tool_call_id="t1"),
        ToolMessage("two", tool_call_id="t2", status="error"),
        HumanMessage("more"),
    ]
    system, turns = to_anthropic(state)
    assert system == "sys"
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "user"]
    assert [b["tool_use_id"] for b in turns[2]["content"]] == ["t1", "t2"]
    assert turns[2]["content"][1]["is_error"] is True
    back = from_anthropic([{"type": "text", "text": "sys"}], turns)
    assert [m.type for m in back] == ["system", "human", "ai", "tool", "tool", "human"]
    assert [c["id"] for c in back[2].tool_calls] == ["t1", "t2"]
    # converting what came back gives the same turns: nothing lost either way
    assert to_anthropic(back)[1] == turns
