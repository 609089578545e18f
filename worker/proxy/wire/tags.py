"""Tagged text blocks: what the canonical form (user and assistant turns of content blocks) cannot
hold natively, carried in a text block that converts back exactly.

- a `developer` or `system` message in the middle of an OpenAI conversation: its text in a user turn,
  `<compactd-role role="developer">` … `</compactd-role>`, sent upstream again as that role's message;
- an item compactd has no canonical form for (a hosted tool's call, a tool search's output …):
  `<compactd-item>` + its JSON + `</compactd-item>`, sent upstream again byte for byte as JSON.

A client's own text that happens to start with one of these tags is wrapped in a role tag of its
own role, so no text a user or a tool wrote can become a developer message or an item upstream.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from worker.compaction.pointers import TAG_OPENERS

ITEM_OPEN, ROLE_OPEN = TAG_OPENERS  # no compaction stage cuts a text that starts with one
_ROLE = re.compile(
    r'^<compactd-role role="(developer|system|user|assistant)">\n(.*)\n</compactd-role>$', re.S
)
_ITEM = re.compile(r"^<compactd-item>(.*)</compactd-item>$", re.S)


def role_block(role: str, text: str) -> dict[str, Any]:
    return {"type": "text", "text": f'{ROLE_OPEN}{role}">\n{text}\n</compactd-role>'}


def item_block(item: dict[str, Any]) -> dict[str, Any]:
    data = orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode()
    return {"type": "text", "text": f"{ITEM_OPEN}{data}</compactd-item>"}


def text_block(role: str, text: str) -> dict[str, Any]:
    """A client's own text as a canonical block: as it is, unless it could be read as a tag."""
    if text.startswith((ROLE_OPEN, ITEM_OPEN)):
        return role_block(role, text)
    return {"type": "text", "text": text}


def read_role(block: dict[str, Any]) -> tuple[str, str] | None:
    """(role, text) of a role-tagged block, else None."""
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str) or not text.startswith(ROLE_OPEN):
        return None
    found = _ROLE.match(text)
    return (found.group(1), found.group(2)) if found else None


def read_item(block: dict[str, Any]) -> dict[str, Any] | None:
    """The item a tagged block carries, else None."""
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str) or not text.startswith(ITEM_OPEN):
        return None
    found = _ITEM.match(text)
    if not found:
        return None
    try:
        item = orjson.loads(found.group(1))
    except orjson.JSONDecodeError:
        return None
    return item if isinstance(item, dict) else None
