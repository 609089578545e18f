"""Transcript <-> JSON: the snapshot state the worker stores and resumes from."""

from __future__ import annotations

from typing import Any

from worker.compaction.model import Handoff, Transcript, Turn


def transcript_to_json(t: Transcript) -> dict[str, Any]:
    """A JSON-able dict of the compacted state (files are persisted separately and not included)."""
    return {
        "system": t.system,
        "memory": t.memory,
        "handoff": None
        if t.handoff is None
        else {
            "text": t.handoff.text,
            "archive_refs": list(t.handoff.archive_refs),
            "archived_seqs": [list(r) for r in t.handoff.archived_seqs],
            "tokens": t.handoff.tokens,
            "facts": dict(t.handoff.facts),
            "summarizer": t.handoff.summarizer,
            "input_tokens": t.handoff.input_tokens,
            "output_tokens": t.handoff.output_tokens,
            "earlier": list(t.handoff.earlier),
        },
        "turns": [turn_to_json(turn) for turn in t.turns],
        "cache_mark": t.cache_mark,
        "epoch_from": t.epoch_from,
        "standing_mark": t.standing_mark,
        "notes_mark": t.notes_mark,
    }


def transcript_from_json(data: dict[str, Any]) -> Transcript:
    h = data.get("handoff")
    handoff = (
        None
        if h is None
        else Handoff(
            text=h["text"],
            archive_refs=tuple(h["archive_refs"]),
            archived_seqs=tuple((int(a), int(b)) for a, b in h["archived_seqs"]),
            tokens=int(h.get("tokens", 0)),
            facts=h.get("facts") or {},
            summarizer=h.get("summarizer", "extractive"),
            input_tokens=int(h.get("input_tokens", 0)),
            output_tokens=int(h.get("output_tokens", 0)),
            earlier=tuple(h.get("earlier") or ()),
        )
    )
    return Transcript(
        system=data.get("system", ""),
        memory=data.get("memory", ""),
        handoff=handoff,
        turns=tuple(turn_from_json(x) for x in data.get("turns", [])),
        cache_mark=int(data.get("cache_mark", 0)),
        epoch_from=int(data.get("epoch_from", 0)),
        standing_mark=int(data.get("standing_mark", 0)),
        notes_mark=bool(data.get("notes_mark", False)),
    )


def turn_to_json(turn: Turn) -> dict[str, Any]:
    return {"seq": turn.seq, "role": turn.role, "content": list(turn.content), "tokens": turn.tokens}


def turn_from_json(data: dict[str, Any]) -> Turn:
    return Turn(
        seq=int(data["seq"]),
        role=data["role"],
        content=tuple(data["content"]),
        tokens=int(data.get("tokens", 0)),
    )
