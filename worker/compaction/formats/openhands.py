"""OpenHands event streams (a JSON array of actions and observations) as an Anthropic conversation.

- user `message` actions are user text; agent `message` actions and `finish` are assistant text
  (finish: its thought and final answer, no tool call);
- agent actions with `tool_call_metadata` are tool_use blocks: id = tool_call_id, name =
  function_name, input = the arguments the model actually sent (from the recorded model response;
  `args` without OpenHands' own fields when that is missing); the action's `thought` is the text
  before the call. Actions from one model response are one assistant message;
- an observation is the tool_result of the action named by its `cause` (`extras.metadata`
  prefix/suffix such as the exit code line are kept, as OpenHands shows them to the model; an
  empty output falls back to the event's message; `error` observations are errors);
- environment events, state changes and observations of non-tool actions carry no conversation:
  dropped, counted in meta["dropped_events"]. Events that are not objects are skipped with a warning.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from worker.compaction.errors import InvalidTranscript
from worker.compaction.formats.blocks import result, text_block, tool_use_block
from worker.compaction.formats.documents import object_at, parse_document, text_at
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.shaping import Entry, shape
from worker.compaction.model import Block

# args OpenHands adds for itself; never part of what the model sent
OWN_ARGS = {
    "thought",
    "impl_source",
    "translated_ipython_code",
    "blocking",
    "hidden",
    "confirmation_state",
    "is_input",
}


def load(data: bytes) -> Imported:
    """Import an OpenHands event list."""
    doc = parse_document(data, "OpenHands events")
    events = doc.get("events") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InvalidTranscript("OpenHands events: expected a JSON array of events")
    warnings: list[str] = []
    dropped: Counter[str] = Counter()
    calls: dict[Any, str] = {}  # action event id -> tool_call_id
    entries = []
    for i, event in enumerate(events):
        where = f"event {event.get('id', i) if isinstance(event, dict) else i}"
        if not isinstance(event, dict):
            warnings.append(f"events[{i}]: a {type(event).__name__}, not an event object; skipped")
            continue
        entry = _entry(event, where, calls, warnings)
        if entry is None:
            dropped[f"{event.get('source')}/{event.get('action') or event.get('observation')}"] += 1
        else:
            entries.append(entry)
    messages, _ = shape(entries, warnings)
    meta = {"source_events": len(events), "dropped_events": dict(sorted(dropped.items()))}
    return Imported("", messages, "openhands", tuple(warnings), meta)


def _entry(event: dict[str, Any], where: str, calls: dict[Any, str], warnings: list[str]) -> Entry | None:
    source, args = event.get("source"), object_at(event, "args")
    metadata = object_at(event, "tool_call_metadata")
    action = event.get("action")
    if action is not None:
        if source == "user" and action == "message":
            return _text_entry("user", args.get("content", event.get("message")), where)
        if source != "agent":
            return None
        if action == "message":
            return _text_entry("assistant", args.get("content", event.get("message")), where)
        if action == "finish":
            outputs = object_at(args, "outputs")
            answer = [args.get("thought"), args.get("final_thought"), outputs.get("content")]
            return _text_entry("assistant", "\n\n".join(a for a in answer if isinstance(a, str) and a), where)
        if not metadata:
            return None
        return _call_entry(event, args, metadata, where, calls, warnings)
    cause = event.get("cause")
    if not isinstance(cause, int | str) or cause not in calls:
        return None
    output = _output(event)
    is_error = True if event.get("observation") == "error" else None
    return Entry("user", (result(calls[cause], output, where, warnings, is_error=is_error),), where)


def _text_entry(role: str, text: Any, where: str) -> Entry | None:
    block = text_block(text) if isinstance(text, str) else None
    return Entry("user" if role == "user" else "assistant", (block,) if block else (), where)


def _call_entry(
    event: dict[str, Any],
    args: dict[str, Any],
    metadata: dict[str, Any],
    where: str,
    calls: dict[Any, str],
    warnings: list[str],
) -> Entry:
    """The thought and tool call of an agent action, grouped by the model response it came from."""
    call_id, name = metadata.get("tool_call_id"), metadata.get("function_name")
    response = object_at(metadata, "model_response")
    sent = _sent_arguments(response, call_id)
    arguments = sent if sent is not None else {k: v for k, v in args.items() if k not in OWN_ARGS}
    blocks: list[Block] = []
    thought = text_block(text_at(args, "thought"))
    if thought:
        blocks.append(thought)
    call = tool_use_block({"id": call_id, "name": name, "input": arguments}, where, warnings)
    if call is not None:
        blocks.append(call)
        if call["type"] == "tool_use" and isinstance(event.get("id"), int | str):
            calls[event["id"]] = call["id"]
    group = text_at(response, "id") or None
    return Entry("assistant", tuple(blocks), where, group=group)


def _sent_arguments(response: dict[str, Any], call_id: Any) -> Any:
    """The raw arguments of call_id in the recorded model response (None when absent)."""
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        for call in (message or {}).get("tool_calls") or []:
            if (
                isinstance(call, dict)
                and call.get("id") == call_id
                and isinstance(call.get("function"), dict)
            ):
                return call["function"].get("arguments")
    return None


def _output(event: dict[str, Any]) -> str:
    """What the model was shown for an observation: its content with OpenHands' prefix/suffix."""
    content = text_at(event, "content")
    extras = object_at(event, "extras")
    metadata = object_at(extras, "metadata")
    text = text_at(metadata, "prefix") + content + text_at(metadata, "suffix")
    return text if text.strip() else text_at(event, "message")
