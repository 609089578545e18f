"""Prefixes: whether one request repeats another's start, as the provider compares them.

A model with preserved thinking binds each thinking block to the request before it (system, tools,
every earlier message), and the prompt cache reads only a repeated prefix. Both compare values,
not bytes: `cache_control` markers do not count, a string content is the text block it stands for,
key order does not count. Used to count rewrites (a served request that does not extend the one
before it) and to find where a rewrite begins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def comparable(value: Any) -> Any:
    """`value` as the provider compares it: every cache_control removed, string message content as
    one text block (a dict's key order never counts in ==)."""
    if isinstance(value, dict):
        out = {k: comparable(v) for k, v in value.items() if k != "cache_control"}
        if "role" in out and isinstance(out.get("content"), str):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def _system(request: Mapping[str, Any]) -> Any:
    system = request.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return comparable(system or [])


def first_change(previous: Mapping[str, Any], current: Mapping[str, Any]) -> int | None:
    """The index of the first message of `previous` that `current` does not repeat (-1: its
    system or tools changed), None when `current` extends `previous` (every message repeated)."""
    if _system(previous) != _system(current) or comparable(previous.get("tools") or []) != comparable(
        current.get("tools") or []
    ):
        return -1
    old: Sequence[Any] = previous.get("messages") or []
    new: Sequence[Any] = current.get("messages") or []
    for i, message in enumerate(old):
        if i >= len(new) or comparable(message) != comparable(new[i]):
            return i
    return None


def extends(previous: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether `current` repeats all of `previous` and only adds at the end."""
    return first_change(previous, current) is None
