"""A secret cut in two by a message boundary is redacted in both messages (worker/redaction/seams.py)."""

from __future__ import annotations

import re

import pytest

from worker.compaction.model import Policy
from worker.ingest import ingest
from worker.redaction import Redactor
from worker.redaction.seams import continued, edge_text, redact_seams, reseam, with_edge_text

R = Redactor(b"seam-key")
KEY = "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"


def _text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


@pytest.mark.parametrize(
    ("blocks", "first", "last"),
    [
        ((_text("a"), _text("b")), "a", "b"),
        (({"type": "tool_result", "tool_use_id": "t", "content": "out"},), "out", "out"),
        (({"type": "tool_result", "tool_use_id": "t", "content": [_text("x"), _text("y")]},), "x", "y"),
        (({"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}},), "", ""),
        (({"type": "thinking", "thinking": "hm", "signature": "s"},), "", ""),
        ((), "", ""),
    ],
)
def test_edge_text_is_the_text_a_message_starts_and_ends_with(blocks, first, last) -> None:  # type: ignore[no-untyped-def]
    assert edge_text(blocks, last=False) == first
    assert edge_text(blocks, last=True) == last
    if first:
        assert edge_text(with_edge_text(blocks, "NEW", last=False), last=False) == "NEW"
        assert edge_text(with_edge_text(blocks, "NEW", last=True), last=True) == "NEW"


def test_a_key_cut_between_a_tool_result_and_the_next_text_is_gone_from_both() -> None:
    cut = len(KEY) // 2
    messages = [
        ("user", ({"type": "tool_result", "tool_use_id": "t", "content": [_text(f"token: {KEY[:cut]}")]},)),
        ("assistant", (_text(f"{KEY[cut:]} is the rest"),)),
    ]
    (_, a), (_, b) = redact_seams(messages, R)
    joined = edge_text(a, last=True) + "|" + edge_text(b, last=False)
    assert KEY[:cut] not in joined and KEY[cut:] not in joined
    assert joined.startswith("token: [REDACTED:") and joined.endswith("] is the rest")


def test_ingest_redacts_a_key_split_across_two_turns_and_leaves_others_alone() -> None:
    cut = 17
    msgs = [
        {"role": "user", "content": f"export GITHUB_TOKEN={KEY[:cut]}"},
        {"role": "assistant", "content": f"{KEY[cut:]}\nDone."},
        {"role": "user", "content": "thanks"},
    ]
    turns = ingest(msgs, first_seq=1, redactor=R, policy=Policy()).turns
    texts = [t.content[0]["text"] for t in turns]
    assert all(KEY[:cut] not in t and KEY[cut:] not in t for t in texts)
    assert texts[1].endswith("]\nDone.") and texts[2] == "thanks"


def test_a_key_split_after_a_boundary_a_secret_crossed_is_gone_from_both_halves() -> None:
    """Three messages: a password runs on into the second (`…-password VMware1![Interface]`), whose
    end holds the first half of a WireGuard key, the third its rest. Both boundaries are scanned in
    the texts as they came, so the first (which sees the key's first half alone) does not hide the
    key from the second; both halves get one placeholder."""
    key = "AsaFot43bfs1fEWjvtty+rGcjh3rP1H6sug1l3u19ix="
    msgs = [
        {"role": "user", "content": "connect-viserver vc.lab.local -user administrator -password VMware1!"},
        {"role": "assistant", "content": f"[Interface]\nAddress = 10.0.0.3/32\nPrivateKey = {key[:22]}"},
        {"role": "user", "content": f"{key[22:]}\nDNS = 8.8.8.8\n"},
    ]
    texts = [t.content[0]["text"] for t in ingest(msgs, first_seq=1, redactor=R, policy=Policy()).turns]
    assert all(key[i : i + 8] not in t for t in texts for i in range(len(key) - 7))
    assert texts[2].endswith("]\nDNS = 8.8.8.8\n") and "Address = 10.0.0.3/32" in texts[1]
    assert texts[1].endswith(texts[2].split("\n")[0])


def test_a_key_block_that_is_not_pem_takes_its_rest_across_two_appends() -> None:
    """The stored turn ends with a WireGuard key's first half, already a placeholder; the next
    append's first message starts with its rest: that rest goes (a PEM key's would run to END)."""
    left = "[Interface]\nPrivateKey = " + R.placeholder("private_key", "AsaFot43bfs1fEWjvtty+r")
    _, right = continued(left, "Gcjh3rP1H6sug1l3u19ix=\nDNS = 8.8.8.8", R)
    assert right.startswith("[REDACTED:private_key:") and right.endswith("]\nDNS = 8.8.8.8")


def _ingested(*texts: str) -> list[str]:
    msgs = [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]
    return [t.content[0]["text"] for t in ingest(msgs, first_seq=1, redactor=R, policy=Policy()).turns]


def test_a_value_that_runs_on_into_a_split_token_does_not_hide_the_tokens_rest() -> None:
    """`API_KEY=…` ends one message and reads on into the next (the first half of an npm token,
    which both boundaries cut); the third holds that token's rest: each boundary is scanned in the
    texts as they came, so the first replacing the second message whole hides nothing from the next."""
    token = "npm_TCllNwh2WLQlMWVhybM1iQrsTj6rMQ0BOh6d"
    texts = _ingested("MW_PX_API_KEY=px-api-c20a2cba-d3c9-45c1-a556-8864040b8f79", token[:20], token[20:])
    assert all(token[i : i + 8] not in t for t in texts for i in range(len(token) - 7))


def test_a_value_that_runs_on_into_a_key_name_stops_at_the_boundary() -> None:
    """`Secret=…` | `$token = "…` | `…"`: the next message's key name is not taken as more of the
    first value, so its own value, split across the next boundary, is still found."""
    value = "58oo4mvqr2tpw7b4w3loeckwfu5o6nw3sihfckvlwoxgqimlddza"
    texts = _ingested(
        "Id=09pv;Secret=GcoEA53t7GLRNJ910M46IrbHO/Vg0tt4HujRdsaCoTY=",
        f'$token = "{value[:26]}',
        f'{value[26:]}"\n',
    )
    assert texts[1].startswith('$token = "[REDACTED:')
    assert all(value[i : i + 8] not in t for t in texts for i in range(len(value) - 7))


def test_a_token_cut_before_the_colon_that_follows_it_is_still_gone_from_both_sides() -> None:
    """A token used as a map key (`{"ghp_…": "ci-bot"}`) cut in two: the part after the join reads
    like a key name before `": `, but the left part is no secret alone, so nothing is trimmed."""
    left, right = R.redact_seam('{"' + KEY[:7], KEY[7:] + '": "ci-bot"}')
    assert all(KEY[i : i + 8] not in left + right for i in range(len(KEY) - 7))
    assert right.endswith('": "ci-bot"}')


def test_what_a_value_shown_whole_takes_of_the_next_message() -> None:
    """The price of never keeping half a key, as README (Redaction, item 4) states it: a token that
    ends one message with no space after it takes the next message's first word along; under the
    strict profile a value to the line's end takes the next message's first line (a message
    boundary is no line end), never its later lines; quoted values end at their quote."""
    from worker.redaction.scanner import strict_rules

    def second(first: str, then: str, redactor: Redactor) -> str:
        msgs = [{"role": "user", "content": first}, {"role": "assistant", "content": then}]
        return ingest(msgs, first_seq=1, redactor=redactor, policy=Policy()).turns[1].content[0]["text"]

    strict = Redactor(b"seam-key", strict_rules())
    assert second(f"export GITHUB_TOKEN={KEY}", "ok, now run the tests", R).endswith("], now run the tests")
    taken = second("set API_KEY=abc123 please", "Done. Running the tests.\nAll passed.", strict)
    assert taken.startswith("[REDACTED:") and taken.endswith("]\nAll passed.")
    assert second("set API_KEY=abc123 please", "Done. Running the tests.", R) == "Done. Running the tests."
    quoted = second('DB_PASSWORD="Tr0ub4dor &3x', 'Qz9 gl0rp Vexx" and the rest', strict)
    assert "gl0rp" not in quoted and quoted.endswith(" and the rest")


@pytest.mark.parametrize(
    ("left", "right", "rest"),
    [
        # base64 padding that closes the quoted header value, and padding at the text's end, are
        # the token's rest, not `name=` starting the next message's assignment
        ("curl -H 'Authorization: Basic Yn", "Jvd3Nlcjo=' \\", "Jvd3Nlcjo="),
        (
            "Endpoint=sb://x.servicebus.windows.net/;Secret=abCD1EF+GHIJxLMnOPqRSa53VWX05zaBCdE/",
            "fg9hi4k=",
            "fg9hi4k=",
        ),
        # a random-looking "name" before `=` is the rest of a token that holds an `=`
        (
            "SharedAccessKey=S8ii67l3Gd1Ba69a",
            'z78iP9UksewzhjvUfh1DIuDs30w="\n}',
            "z78iP9UksewzhjvUfh1DIuDs30w=",
        ),
    ],
)
def test_a_tokens_rest_ending_in_padding_is_not_taken_for_a_key_name(
    left: str, right: str, rest: str
) -> None:
    new_left, new_right = R.redact_seam(left, right)
    assert rest not in new_right and new_right.startswith("[REDACTED:"), (new_left, new_right)


def _across_appends(left: str, right: str, redactor: Redactor = R) -> tuple[str, str]:
    """The two halves as the store keeps them when `left` ended one append and `right` starts the
    next: the first redacted alone and stored, the second ingested after it, the boundary reseamed."""
    stored = ingest([{"role": "user", "content": left}], first_seq=1, redactor=redactor, policy=Policy())
    first = stored.turns[0].content
    msgs = [{"role": "assistant", "content": right}]
    then = ingest(msgs, first_seq=2, redactor=redactor, policy=Policy(), after=("user", first))
    stored_now = then.after if then.after is not None else first  # what the store writes back
    return edge_text(stored_now, last=True), edge_text(then.turns[0].content, last=False)


JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2"
    "MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def _windows_in(secret: str, *texts: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7) if any(secret[i : i + 8] in t for t in texts)]


def test_a_half_stored_before_the_next_append_is_joined_with_the_rest_as_it_came() -> None:
    """A JWT cut in its header: the second append's half is a JWT alone from its payload on, so
    redacting it alone first would leave the header's rest and hide the whole from the boundary's
    scan; the append redacts the boundary before its own messages are redacted alone."""
    left, right = _across_appends(f"The header: {JWT[:17]}", f"{JWT[17:]} is the session token")
    assert _windows_in(JWT, left, right) == []
    assert right.startswith("[REDACTED:") and right.endswith("] is the session token")


def test_the_last_resort_redacts_the_halves_as_each_was_redacted_alone() -> None:
    """reseam, for when the stored message changed after the append read it three times over:
    a key recognised in the stored half takes its rest from the other (`continued`)."""
    left = "[Interface]\nPrivateKey = " + R.placeholder("private_key", "AsaFot43bfs1fEWjvtty+rGcjh3rP")
    first = (_text("1H6sug1l3u19ix=\nDNS = 10.0.0.1"),)
    fixed = reseam((_text(left),), first, R)
    assert fixed is not None and edge_text(fixed.first, last=False).startswith("[REDACTED:private_key:")
    assert "1H6sug1l3u19ix" not in edge_text(fixed.first, last=False)


@pytest.mark.parametrize(
    ("left", "right", "kept"),
    [
        # a token recognised alone, its rest begun after the placeholder (`[REDACTED:…]-31`)
        ("xoxa-2-511111111-31111111111-3111111111", "111-e039d02840a0b9379c is the bot", " is the bot"),
        # a quoted string the boundary cuts, on a line where a redaction took its key's context
        ('<add key="Password" value="Cleartext', 'Password1" />', '" />'),
    ],
)
def test_a_half_recognised_alone_takes_the_rest_of_its_token(left: str, right: str, kept: str) -> None:
    """Both profiles: neither half of the secret is left on its side."""
    from worker.redaction.scanner import strict_rules

    left_half, right_half = re.split(r'[="]', left)[-1], right[: len(right) - len(kept)]
    for redactor in (R, Redactor(b"seam-key", strict_rules())):
        new_left, new_right = _across_appends(left, right, redactor)
        assert left_half not in new_left and right_half not in new_right, (new_left, new_right)
        assert new_right.startswith("[REDACTED:") and new_right.endswith(kept)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("the token " + R.placeholder("secret", "x") + " isn't", "working, it's odd"),  # prose
        ("the token is " + R.placeholder("secret", "x") + ".", "Next, the tests."),  # a sentence's end
        ("Saved the key " + R.placeholder("secret", "x") + " to Bob'", "s vault too."),  # no quote
        ("Token " + R.placeholder("secret", "x") + " stored. Don'", "ll rotate it."),
    ],
)
def test_what_follows_a_placeholder_is_not_taken_when_it_is_no_token(left: str, right: str) -> None:
    assert continued(left, right, R) == (left, right)


def test_a_quoted_value_does_not_stop_at_a_key_name_before_its_closing_quote() -> None:
    """`'ATATT…HEA` | `M4Wiv_lS2p=569C'`: inside the quote, `name=` is the token's rest."""
    token = (
        "ATATT3xFfGF0"
        + "Hv2D5CyGjDnjGL5j9medBUqpDdy923KtUnA3BBICVROxYboITpzmWeDhIeFvj" * 2
        + "M4Wiv_lS2pCKo=569C722C"
    )
    cut = token.index("M4Wiv")
    texts = _ingested(f"'token' => env('JIRA_API_TOKEN', '{token[:cut]}", f"{token[cut:]}'),\n],")
    assert _windows_in(token, *texts) == [], texts


@pytest.mark.parametrize(
    ("left", "right", "rest"),
    [
        ('password: "correct horse', ' battery staple" for the db', "battery staple"),
        ('DB_PASSWORD="Xk9mP2 vLq7', ' Wz4 horse" ok', "Wz4 horse"),
    ],
)
def test_a_quoted_passphrase_the_stored_half_shows_redacted_goes_to_its_closing_quote(
    left: str, right: str, rest: str
) -> None:
    """The stored half already redacted the value's first words (`"[REDACTED:…]`): its rest, spaces
    and all, goes up to the closing quote, in both profiles, as it would within one append."""
    from worker.redaction.scanner import strict_rules

    for redactor in (R, Redactor(b"seam-key", strict_rules())):
        _, new_right = _across_appends(left, right, redactor)
        assert rest not in new_right and new_right.startswith("[REDACTED:"), new_right
