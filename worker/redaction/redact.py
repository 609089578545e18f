"""Redaction: every secret becomes a typed, keyed placeholder before anything is persisted.

    Redactor(key).redact_text(text)     "[REDACTED:<kind>:<8 hex>]" per secret, hex = HMAC-SHA256
    Redactor(key).redact_value(value)   any JSON value: strings and string keys redacted, shape kept
    Redactor(key).redact_block(block)   an Anthropic content block of any type, at any depth
    Redactor(key).redact_seam(a, b)     (a, b) with a secret cut between a's end and b's start replaced
    Redactor(key).findings(text)        [Finding(kind, start, end)], for tests and the bench

The placeholder names the kind and an HMAC of the secret under a per-deployment key: the same
secret always gets the same placeholder (an agent can still tell two keys apart), the key keeps
anyone from confirming a guess, and 32 bits reveal nothing of the secret. The HMAC is taken over
the unescaped secret (`\\/` -> `/`, `%40` -> `@`), so escaped and plain copies match. A
placeholder matches no detector, so redacting twice changes nothing.
Percent- and JSON-escaped text is also scanned decoded (encoded.py): a secret whose context the
escapes hide replaces its whole encoded token.

What is not a secret, by policy: tool-use, message and request ids (`toolu_…`, `call_…`,
`msg_…`, `req_…`), git SHAs, UUIDs, hex content hashes, and base64 image/document payloads
(`{"type": "image"|"document", "source": {"type": "base64", …}}` are skipped whole). In a block,
the fields the API reads as ids, verifies or decrypts (`id`, `tool_use_id`, `signature`,
`encrypted_content`, `file_id`, …) are kept as they are; every other string is scanned, whatever
the block type: documents (text and content sources, titles), search results, citations,
server-tool and MCP blocks, and tool inputs, keys included.

Thinking blocks are signed by the API: editing one invalidates its signature, and a forged
`redacted_thinking` block is rejected too. A thinking block without secrets is kept untouched.
One that contains a secret cannot be kept (the secret would reach storage) nor edited, so it is
replaced by a text block saying that a thinking block was removed. The API accepts prior turns
without their thinking; the one case it rejects is an assistant turn that continues a tool loop
with thinking enabled, where the caller must resend without thinking for that request. Dropping
the block silently would hide why the reasoning vanished; the note keeps the transcript honest.
`redacted_thinking` blocks are opaque and encrypted already: kept.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import re
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

import orjson

from worker.redaction.encoded import encoded_secrets, may_hide_secrets
from worker.redaction.keywords import is_assigned_secret, secret_kind_of_key
from worker.redaction.scanner import ALL, KEYED_FIELD, Finding, Ruleset, find, find_spans
from worker.redaction.shapes import looks_random
from worker.redaction.strict import names_credential

__all__ = ["THINKING_REMOVED", "Block", "Finding", "Redactor"]

# an Anthropic content block as JSON (compaction.model.Block is the same type; redaction does
# not import the compaction engine)
Block = dict[str, Any]

THINKING_REMOVED = "[compactd: a thinking block was removed because it contained a secret]"
# How far from a turn boundary a secret cut by it is looked for, each side (a PEM key is ~3,300).
SEAM_CHARS = 4_096
# a key name and the operator after it: a value that ran on across a boundary into one stops at
# the boundary (`Secret=x9` | `$token = "…"`, `NEXT=v`). A token's base64 padding is no operator:
# `=` right after a name must have a value after it (`…ix=` at a line's or the text's end, `==`,
# and `…jo='` or `…0w="` that close the string the value is in, are padding)
_KEY_NAME = re.compile(rb"[$@]?[A-Za-z_][A-Za-z0-9_.-]{0,39}")
_ASSIGN = re.compile(rb"[\"']?(?:[ \t]+(?:=>|:?=|:)|=>|:?=(?![=\s]|\Z|[\"'`](?:[\s,;)\]}>\\]|\Z))|:[ \t])")


def _runs_into_key(data: bytes, start: int, join: int, end: int) -> bool:
    """Whether the part of a secret after the join, data[join:end], starts with a key name and
    its operator (`$token = "`, `NEXT_KEY=`): a value that read on into the next text's key. A
    name that looks random is the token's rest, not a key (`…v5U0QtygZbxhUG73VMwzmlHEAM4Wiv=5…`),
    and so is anything before the closing quote of a value quoted before the join (`'ATATT…`)."""
    quote = data[start - 1 : start]
    if quote and quote in b"\"'`" and quote not in data[start:join]:
        return False
    name = _KEY_NAME.match(data, join, end)
    if name is None or _ASSIGN.match(data, name.end()) is None:
        return False
    return not looks_random(name.group().decode("ascii", "replace"), min_len=10)


_ESCAPES = (("\\/", "/"), ('\\"', '"'), ("\\n", "\n"), ("\\\\", "\\"))
# Block fields the API verifies or decrypts: never edited (a signature or ciphertext holds no text).
_VERIFIED_FIELDS = frozenset({"signature", "encrypted_content", "encrypted_index"})
# Block fields that are ids and types: not secrets by policy, kept unless a secret is found in one.
_ID_FIELDS = frozenset({"type", "id", "tool_use_id", "file_id", "media_type"})
# Sources whose payload is a reference to an uploaded file, or binary base64: passed through whole
# (base64 text, `text/*`, is decoded and redacted like any text).
_OPAQUE_SOURCES = frozenset({"base64", "file"})


def _unescaped(secret: str) -> str:
    for escaped, plain in _ESCAPES:
        secret = secret.replace(escaped, plain)
    return unquote(secret) if "%" in secret else secret


# ids the API mints and block/media types: not secrets by policy, kept without a scan (the hot path)
_MINTED_ID = re.compile(
    r"(?:toolu|srvtoolu|mcptoolu|msg|file|call|req)_[A-Za-z0-9_-]{1,200}|[a-z_]{1,40}(?:/[a-z0-9.+-]{1,60})?"
)


_WORD_KEY = re.compile(r"[a-z_]{1,40}")


# word keys met (`type`, `file_path`, `tool_use_id`: the same few in every block), at most this many
_WORD_KEYS_KEPT = 4_096
_word_keys: dict[str, None] = {}


def _is_word_key(key: str) -> bool:
    """Whether a key is a lowercase word, which by policy holds no secret. Word keys are
    remembered (a dict look-up instead of the regex); a key that is no word is not kept."""
    if key in _word_keys:
        return True
    if _WORD_KEY.fullmatch(key) is None:
        return False
    if len(_word_keys) < _WORD_KEYS_KEPT:
        _word_keys[key] = None
    return True


def _plain_id(value: str, rules: Ruleset) -> bool:
    """Whether an id or type field holds no secret (one the API mints, or none found in it)."""
    return _MINTED_ID.fullmatch(value) is not None or not find_spans(
        value.encode("utf-8", "surrogatepass"), rules
    )


def _is_base64_text(source: dict[str, Any]) -> bool:
    """A base64 source of text (`text/plain`, `text/csv`, …): its decoded text can hold secrets."""
    media = source.get("media_type")
    return (
        source.get("type") == "base64"
        and isinstance(media, str)
        and media.startswith("text/")
        and isinstance(source.get("data"), str)
    )


def _is_base64_source(value: dict[str, Any]) -> bool:
    source = value.get("source")
    return (
        value.get("type") in ("image", "document")
        and isinstance(source, dict)
        and source.get("type") == "base64"
    )


Cut = tuple[int, int, str, str]  # (start, end, kind, secret), byte offsets

# How many clean texts a Redactor remembers (by digest: 16 bytes each, no text kept).
CLEAN_KEPT = 16_384


class CleanTexts:
    """Digests of texts in which a Redactor found nothing: a text seen again (a tool's name, `Bash`,
    in every call; a repeated tool output) skips the scan. The verdict is a function of the bytes
    and the rules alone, so it is the scan's own. Only digests are kept: no text, no secret.
    Bounded, the oldest forgotten first; safe for threads that share a Redactor.

    Digests are keyed by a scope (`scoped`: the tenant): a tenant never skips a scan because
    another sent the same text, so the time of its appends tells it nothing of theirs."""

    __slots__ = ("_scope", "_seen")

    def __init__(self, seen: dict[bytes, None] | None = None, scope: bytes = b"") -> None:
        self._seen: dict[bytes, None] = {} if seen is None else seen
        self._scope = scope

    def scoped(self, scope: bytes) -> CleanTexts:
        """The same bounded memory, its digests keyed by `scope` (at most 64 bytes)."""
        return CleanTexts(self._seen, scope)

    def digest(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=16, key=self._scope).digest()

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._seen

    def add(self, digest: bytes) -> None:
        if len(self._seen) >= CLEAN_KEPT:
            # the oldest first; another thread may change the dict between `iter` and `next` (then
            # this add forgets nothing, the next one does)
            with contextlib.suppress(RuntimeError):
                self._seen.pop(next(iter(self._seen), b""), None)
        self._seen[digest] = None


def _spliced(data: bytes, cuts: list[tuple[int, int, bytes]]) -> str:
    """data with each (start, end) range, left to right and disjoint, replaced by its bytes."""
    out: list[bytes] = []
    pos = 0
    for start, end, mark in cuts:
        out += [data[pos:start], mark]
        pos = end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces secrets with `[REDACTED:<kind>:<hmac8>]` placeholders keyed by `key`."""

    key: bytes
    rules: Ruleset = ALL
    # texts found clean (their scan is a function of the rules): pass it on to a Redactor with the
    # same rules (`CountingRedactor.of`, scoped to the append's tenant)
    clean: CleanTexts = field(default_factory=CleanTexts, compare=False, hash=False, repr=False)

    def scoped(self, scope: bytes) -> Redactor:
        """This redactor, its memory of clean texts keyed by `scope` (the tenant: see CleanTexts)."""
        return replace(self, clean=self.clean.scoped(scope))

    def placeholder(self, kind: str, secret: str) -> str:
        """The placeholder of one secret: its kind and the first 8 hex of its keyed HMAC."""
        digest = hmac.new(self.key, _unescaped(secret).encode("utf-8", "surrogatepass"), hashlib.sha256)
        return f"[REDACTED:{kind}:{digest.hexdigest()[:8]}]"

    def findings(self, text: str) -> list[Finding]:
        """Every secret in text with its kind and str offsets, left to right."""
        return find(text, self.rules)

    def _cuts(self, data: bytes) -> list[tuple[int, int, str, str]]:
        """(start, end, kind, secret) of every secret in data, byte offsets, left to right."""
        digest = self.clean.digest(data)
        if digest in self.clean:
            return []
        cuts = self._scanned_cuts(data)
        if not cuts:
            self.clean.add(digest)
        return cuts

    def _scanned_cuts(self, data: bytes) -> list[tuple[int, int, str, str]]:
        spans = find_spans(data, self.rules)
        cuts = [
            (start, end, kind, data[start:end].decode("utf-8", "surrogatepass")) for kind, start, end in spans
        ]
        if may_hide_secrets(data):
            # percent- and JSON-escaped tokens, decoded: their escapes hide the context rules need
            hidden = encoded_secrets(data, spans, lambda decoded: find_spans(decoded, self.rules))
            cuts = sorted(
                cuts + [(h.start, h.end, h.kind, h.secret.decode("utf-8", "replace")) for h in hidden]
            )
        return cuts

    def seam_cuts(self, left: str, right: str) -> tuple[list[Cut], list[Cut]]:
        """Where a secret cut in two by the boundary of two texts (two turns) lies: the end of
        `left` and the start of `right` are scanned joined. A secret that crosses the join is cut
        on both sides, with the whole secret as each cut's secret (one placeholder for both
        halves; neither is recognisable alone), unless it is a value the left side shows whole
        that read on into a key name on the right (then only its left part); one that only the
        joined text reveals (`Pass` | `word = hunter2`) where it lies, and then so are the secrets
        each side shows alone.
        (start, end, kind, secret) byte offsets into each text; none when nothing crosses."""
        tail, head = left[-SEAM_CHARS:], right[:SEAM_CHARS]
        if not tail or not head:
            return [], []
        data = (tail + head).encode("utf-8", "surrogatepass")
        join = len(tail.encode("utf-8", "surrogatepass"))
        cuts = self._cuts(data)
        if not cuts:
            return [], []
        alone = {(s, e) for s, e, _, _ in self._cuts(data[:join])}
        alone |= {(s + join, e + join) for s, e, _, _ in self._cuts(data[join:])}
        if all((s, e) in alone for s, e, _, _ in cuts):
            return [], []
        # The secrets a side shows alone go now too: the redaction of each block, which would find
        # them, sees a text changed here (a JWT's payload crossing the join is a placeholder, so its
        # header, `%20eyJ…`, no longer reads as a JWT). Not one where a window cut the text off:
        # it may be part of a longer token.
        lo = 0 if len(tail) < len(left) else -1
        hi = len(data) if len(head) < len(right) else len(data) + 1
        cuts = [c for c in cuts if (c[0], c[1]) not in alone or (lo < c[0] and c[1] < hi)]
        # a value that ran on into the next text's key name (`Secret=x9` | `$token = "…"`) ends here
        cuts = [
            (s, join, k, data[s:join].decode("utf-8", "surrogatepass"))
            if s < join < e and (s, join) in alone and _runs_into_key(data, s, join, e)
            else (s, e, k, v)
            for s, e, k, v in cuts
        ]
        shift = len(left.encode("utf-8", "surrogatepass")) - join
        return (
            [(s + shift, min(e, join) + shift, k, v) for s, e, k, v in cuts if s < join],
            [(max(s, join) - join, e - join, k, v) for s, e, k, v in cuts if e > join],
        )

    def apply_cuts(self, text: str, cuts: list[Cut], made: dict[tuple[str, str], str] | None = None) -> str:
        """text with each cut replaced by its secret's placeholder; overlapping cuts (two boundaries'
        of one message) become one: a cut inside another keeps the outer one's placeholder, two that
        each reach past the other take the kind of the first and the merged text as the secret.
        Unchanged text is returned as is. `made` holds the placeholders made so far, so that the two
        halves of a crossing secret are one secret (one placeholder, counted once)."""
        if not cuts:
            return text
        made = {} if made is None else made
        data = text.encode("utf-8", "surrogatepass")
        merged: list[Cut] = []
        # at one start the longer span, then the longer secret (a crossing key's whole value)
        for s, e, k, v in sorted(cuts, key=lambda c: (c[0], -c[1], -len(c[3]))):
            if merged and s < merged[-1][1]:
                ps, pe, pk, _ = merged[-1]
                if e > pe:  # one grows the other: the merged text is the secret
                    merged[-1] = (ps, e, pk, data[ps:e].decode("utf-8", "surrogatepass"))
            else:
                merged.append((s, e, k, v))
        for _, _, k, v in merged:
            if (k, v) not in made:
                made[k, v] = self.placeholder(k, v)
        return _spliced(data, [(s, e, made[k, v].encode()) for s, e, k, v in merged])

    def redact_seam(self, left: str, right: str) -> tuple[str, str]:
        """Both texts with the secrets `seam_cuts` finds replaced; unchanged ones as they are."""
        left_cuts, right_cuts = self.seam_cuts(left, right)
        made: dict[tuple[str, str], str] = {}
        return self.apply_cuts(left, left_cuts, made), self.apply_cuts(right, right_cuts, made)

    def redact_text(self, text: str) -> str:
        """text with every secret replaced by its placeholder; unchanged text is returned as is."""
        data = text.encode("utf-8", "surrogatepass")
        cuts = self._cuts(data)
        if not cuts:
            return text
        return _spliced(
            data, [(start, end, self.placeholder(kind, secret).encode()) for start, end, kind, secret in cuts]
        )

    def redact_value(self, value: Any) -> Any:
        """Any JSON value with its strings redacted, dict keys included; a string under a credential
        key is judged whole."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, dict):
            if _is_base64_source(value):
                return self._redact_part(value)  # binary payloads pass whole, base64 text is read
            return {self._redact_key(k): self._redact_field(k, v) for k, v in value.items()}
        return value

    def _redact_key(self, key: Any) -> Any:
        # a key is data too: {"AKIA...": "prod"} or a header line used as a key; a lowercase word
        # key (`file_path`, `tool_use_id`: nearly all of them) holds none and skips the scan
        if not isinstance(key, str) or _is_word_key(key):
            return key
        return self.redact_text(key)

    def _redact_field(self, key: Any, value: Any) -> Any:
        if isinstance(value, str) and isinstance(key, str) and self.rules.has(KEYED_FIELD):
            named = secret_kind_of_key(key)
            if named is not None and is_assigned_secret(named[0], named[1], value, quoted=True):
                return self.placeholder(named[0], value)
            if self.rules.strict and value.strip() and names_credential(key):
                return self.placeholder(named[0] if named else "secret", value)
        return self.redact_value(value)

    def redact_block(self, block: Block) -> Block:
        """A content block with every secret replaced, whatever its type (text and citations, tool
        inputs, results, documents, search results, server-tool and MCP blocks); ids, signatures,
        encrypted and base64 payloads and clean thinking are untouched."""
        kind = block.get("type")
        if kind == "thinking":
            if find_spans(str(block.get("thinking", "")).encode("utf-8", "surrogatepass"), self.rules):
                return {"type": "text", "text": THINKING_REMOVED}
            return block
        if kind == "redacted_thinking":
            # an OpenAI reasoning item (worker/proxy/wire/responses.py) carries its summary in
            # plain text beside the encrypted part: one with a secret in it goes, as thinking does
            text = _reasoning_text(str(block["data"])) if is_reasoning_item(block) else ""
            if text and find_spans(text.encode("utf-8", "surrogatepass"), self.rules):
                return {"type": "text", "text": THINKING_REMOVED}
            return block
        return self._redact_part(block)

    def _redact_part(self, part: Any) -> Any:
        """Any piece of a block: every string redacted except opaque fields; `input` is a tool
        argument (judged by key); unchanged parts are returned as they are."""
        if isinstance(part, str):
            return self.redact_text(part)
        if isinstance(part, list):
            out: Any = [self._redact_part(p) for p in part]
        elif isinstance(part, dict) and _is_base64_text(part):
            out = {**part, "data": self._redact_base64_text(part["data"])}
        elif isinstance(part, dict) and part.get("type") not in _OPAQUE_SOURCES:
            out = {self._redact_key(k): self._redact_member(k, v) for k, v in part.items()}
        else:
            return part
        return part if out == part else out

    def _redact_member(self, key: str, value: Any) -> Any:
        if key in _VERIFIED_FIELDS:
            return value
        if key in _ID_FIELDS and isinstance(value, str) and _plain_id(value, self.rules):
            return value
        return self.redact_value(value) if key == "input" else self._redact_part(value)

    def _redact_base64_text(self, data: str) -> str:
        try:
            text = base64.b64decode(data, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return data  # not base64 text after all: the bytes stay as sent
        redacted = self.redact_text(text)
        return data if redacted == text else base64.b64encode(redacted.encode()).decode()


def is_reasoning_item(block: Any) -> bool:
    """An OpenAI reasoning item held as a redacted_thinking block (worker/proxy/wire/responses.py):
    its `data` is the item's JSON."""
    return (
        isinstance(block, dict)
        and block.get("type") == "redacted_thinking"
        and str(block.get("data", "")).startswith("{")
        and '"type":"reasoning"' in str(block.get("data", ""))
    )


def _reasoning_text(data: str) -> str:
    """The plain text of a reasoning item's JSON: its summary and content parts."""
    try:
        item = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    parts = [*(item.get("summary") or []), *(item.get("content") or [])] if isinstance(item, dict) else []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
