"""Which conversation a Messages request belongs to, and whether it is one at all.

- `x-compactd-session: <sid>` names it;
- else Claude Code's `metadata.user_id` (a JSON string with `session_id`, or the older
  `user_..._session_<uuid>` form) plus a keyed hash of the conversation's start (the stable part of
  the system prompt and the first message), so the main conversation, each sub-agent and each side
  query under one client session are histories of their own;
- else the keyed hash of the start alone.

A side request (no tools and a single user message: title generation, a quota probe, one-shot
questions) is passed through untouched: nothing is stored, no session is created.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

import orjson

from worker.proxy.fingerprints import keyed_digest, normalize_message

SESSION_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")
_OLD_USER_ID = re.compile(r"_session_([0-9a-fA-F-]{8,64})$")
_CLIENT_SESSION = re.compile(r"^[A-Za-z0-9-]{1,64}$")
# Claude Code's first system block carries per-request attribution, not instructions
_VOLATILE_SYSTEM_PREFIXES = ("x-anthropic-billing-header",)


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation's key (the first session's id) and how it was found."""

    key: str
    source: str  # "header" | "client_session" | "start" | "previous_response"
    client_session: str | None = None
    # the client session this one was started from (a Codex sub-agent's parent thread): its main
    # conversation is the parent session
    parent_client_session: str | None = None


def is_side_request(body: dict[str, Any], named: bool) -> bool:
    """No tools and a single user message, not named by the header: passed through, never stored."""
    if named:
        return False
    messages = body.get("messages")
    return not body.get("tools") and isinstance(messages, list) and len(messages) <= 1


def system_text(system: Any) -> str:
    """The system prompt's text (blocks joined by blank lines), as the session stores it."""
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        return ""
    return "\n\n".join(
        str(b.get("text", "")) for b in system if isinstance(b, dict) and b.get("type") == "text"
    )


def stable_system_text(system: Any) -> str:
    """The system prompt without the blocks a client changes per request (Claude Code's billing header)."""
    if not isinstance(system, list):
        return system_text(system)
    kept = [
        b
        for b in system
        if isinstance(b, dict) and not str(b.get("text", "")).startswith(_VOLATILE_SYSTEM_PREFIXES)
    ]
    return system_text(kept)


def client_session_id(metadata: Any) -> str | None:
    """The client's session id from `metadata.user_id` (Claude Code), or None."""
    if not isinstance(metadata, dict):
        return None
    user_id = metadata.get("user_id")
    if not isinstance(user_id, str) or not user_id:
        return None
    found: Any = None
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            found = parsed.get("session_id")
    else:
        match = _OLD_USER_ID.search(user_id)
        found = match.group(1) if match else None
    return found if isinstance(found, str) and _CLIENT_SESSION.match(found) else None


def start_digest(key: bytes, body: dict[str, Any]) -> str:
    """Keyed hash of the conversation's start: the stable system text and the first message."""
    messages = body.get("messages") or []
    first = normalize_message(messages[0]) if messages else None
    start = orjson.dumps([stable_system_text(body.get("system")), first], option=orjson.OPT_SORT_KEYS)
    return keyed_digest(key, start.decode())


def client_prefix(client_session: str) -> str:
    """The start of every conversation key under one client session."""
    return f"cc-{client_session}-"


def identify(
    key: bytes,
    body: dict[str, Any],
    named: str | None,
    client: str | None = None,
    parent: str | None = None,
) -> Conversation:
    """The request's conversation (see the module docstring); `named` is the header's value,
    checked; `client` a client session id the request carries another way than Claude Code's
    metadata (an OpenAI client's: session-id, prompt_cache_key, user ...), `parent` its parent's."""
    if named is not None:
        return Conversation(named, "header")
    digest = start_digest(key, body)
    client = client or client_session_id(body.get("metadata"))
    if client is not None:
        return Conversation(f"{client_prefix(client)}{digest[:16]}", "client_session", client, parent)
    return Conversation(f"conv-{digest[:32]}", "start")


def client_id(value: Any, key: bytes) -> str | None:
    """A client-chosen id as a conversation's client session (None when it cannot be one): ids
    longer than 64 or with other characters (an e-mail address as Chat Completions' `user`) are
    hashed with the deployment's key to 32 hex digits, never kept as sent, and a stored hash
    confirms no guess."""
    if not isinstance(value, str) or not value:
        return None
    if _CLIENT_SESSION.match(value):
        return value
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:32]
