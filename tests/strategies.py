"""Hypothesis strategies: valid agent conversations with tool loops, big outputs and repeats."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

WORDS = (
    "alpha",
    "beta",
    "error:",
    "def",
    "return",
    "import",
    "src/app.py",
    "tests/test_x.py",
    "ok",
    "{",
    "}",
)
# Secrets the redactor must catch wherever they are planted (well-known provider shapes).
PLANTED_SECRETS = (
    "AKIAIOSFODNN7EXAMPLF",
    "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH",
    "sk-ant-api03-Zq3xVb7Nm2Kp9Lr4Ts6Wy8Hd1Jf5Gc0Qe3Ua7Io2Pl4Mk6Nj8Bh1Vg5Cf9Xd3Sz7Aw2Ey4Rt6Uy8Io0Pa-AAAAAA",
)


def pieced(
    pieces: st.SearchStrategy[str], *, noise: int, max_pieces: int, min_pieces: int = 0
) -> st.SearchStrategy[str]:
    """Text joined from up to `max_pieces` draws, each one of `pieces` or any text of at most `noise`
    characters (lone surrogates included: encode with "surrogatepass")."""
    return st.lists(st.one_of(pieces, st.text(max_size=noise)), min_size=min_pieces, max_size=max_pieces).map(
        "".join
    )


def text_of(seed: int, lines: int) -> str:
    """Deterministic multi-line text of about `lines` lines (cheap to generate at any size)."""
    return "\n".join(
        f"{i:5d}  {WORDS[(seed + i) % len(WORDS)]} {WORDS[(seed * 7 + i * 3) % len(WORDS)]} value_{(seed * 31 + i) % 997}"
        for i in range(lines)
    )


@st.composite
def tool_unit(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """An assistant message with 1-3 parallel calls and the user message answering them."""
    calls = draw(st.integers(1, 3))
    thinking = draw(st.booleans())
    uses, results = [], []
    for k in range(calls):
        tid = f"toolu_{n:04d}{k}"
        kind = draw(st.sampled_from(["Bash", "Read", "Write", "Edit", "Grep"]))
        if kind == "Write":
            args = {"file_path": f"src/mod_{n}.py", "content": text_of(n, draw(st.integers(1, 200)))}
        elif kind == "Edit":
            args = {
                "file_path": f"src/mod_{n % 3}.py",
                "old_string": "x",
                "new_string": text_of(n + k, draw(st.integers(1, 120))),
            }
        elif kind == "Bash":
            args = {"command": f"pytest -q tests/test_{n % 4}.py"}
        else:
            args = {"file_path": f"src/mod_{n % 5}.py"}
        uses.append({"type": "tool_use", "id": tid, "name": kind, "input": args})
        # a small pool of seeds makes identical outputs recur (dedup material)
        seed = draw(st.integers(0, 4))
        lines = draw(st.sampled_from([1, 5, 40, 300, 900]))
        body = text_of(seed, lines)
        if draw(st.integers(0, 9)) == 0:
            body += f"\nexport AWS_ACCESS_KEY_ID={draw(st.sampled_from(PLANTED_SECRETS))}"
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": body}
        if draw(st.integers(0, 7)) == 0:
            result["is_error"] = True
        results.append(result)
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": f"plan step {n}", "signature": f"sig{n:08d}"})
    content.append({"type": "text", "text": f"Step {n}: I'll run the next tool."})
    return [{"role": "assistant", "content": content + uses}, {"role": "user", "content": results}]


@st.composite
def conversations(draw: st.DrawFn, max_units: int = 30) -> list[dict[str, Any]]:
    """A valid conversation: the task, then tool units and the odd user follow-up."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the failing tests in src/ and keep the API stable."}
    ]
    for n in range(draw(st.integers(1, max_units))):
        if draw(st.integers(0, 5)) == 0:
            messages.append(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"Done with part {n}. Anything else?"}],
                }
            )
            messages.append(
                {"role": "user", "content": f"Also check module {n} and do not touch the README."}
            )
        else:
            messages.extend(draw(tool_unit(n)))
    if draw(st.booleans()):  # end with a call still in flight
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_pending", "name": "Bash", "input": {"command": "make"}}
                ],
            }
        )
    return messages


# Where else a secret can ride in a message: tool-input keys, nested values and JSON strings,
# documents (text and content sources) and search results inside tool results.
PLANT_SPOTS = (
    "input_key",
    "input_nested",
    "input_json",
    "document_text",
    "document_content",
    "search_result",
)


def _plant_input(spot: str, secret: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    if spot == "input_key":
        return {**tool_input, "env": {secret: "prod"}}
    if spot == "input_nested":
        return {**tool_input, "options": [{"headers": [["X-Trace", secret]]}]}
    return {**tool_input, "payload": f'{{"note": "creds", "value": "{secret}"}}'}


def _plant_part(spot: str, secret: str) -> dict[str, Any]:
    text = f"copied from the vault: {secret}"
    if spot == "document_text":
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    if spot == "document_content":
        return {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": text}]},
        }
    return {
        "type": "search_result",
        "source": "https://wiki.example",
        "title": "vault",
        "content": [{"type": "text", "text": text}],
    }


def _plant(block: dict[str, Any], spot: str, secret: str) -> dict[str, Any]:
    if block["type"] == "tool_use" and spot.startswith("input_"):
        return {**block, "input": _plant_input(spot, secret, block["input"])}
    if block["type"] == "tool_result" and not spot.startswith("input_"):
        body = block["content"]
        parts = [{"type": "text", "text": body}] if isinstance(body, str) else list(body)
        return {**block, "content": [*parts, _plant_part(spot, secret)]}
    return block


@st.composite
def planted_conversations(draw: st.DrawFn, max_units: int = 30) -> list[dict[str, Any]]:
    """conversations() with PLANTED_SECRETS hidden in tool inputs, documents and search results."""
    messages = draw(conversations(max_units))
    planted = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list) and draw(st.integers(0, 2)) == 0:
            spot, secret = draw(st.sampled_from(PLANT_SPOTS)), draw(st.sampled_from(PLANTED_SECRETS))
            content = [_plant(b, spot, secret) for b in content]
        planted.append({**message, "content": content})
    return planted
