"""Small pieces the pages share: shortened text, times, the reply table, row picking, a confirmed delete."""

import json
from collections.abc import Callable
from datetime import datetime

import gradio as gr

from chatbot import AuditRecord, ReplyRecord

from .auth import PRIVATE, StaffLogin

CELL_CHARS = 120
VERIFIED_LABELS = {True: "identical", False: "DIFFERS", None: ""}  # ReplyRecord.verified; None: not checked yet
FEEDBACK_LABELS = {1: "up", -1: "down"}
AUDIT_COLUMNS = ["#", "time (UTC)", "who", "action", "entry", "target", "details"]
REPLY_COLUMNS = [
    "reply id", "time (UTC)", "question", "ended", "shown", "why", "exact hit", "speedup", "feedback", "verified",
    "measured speedup",
]
# How a reply ended, for staff; "token limit" flags a reply likely cut off mid-thought.
ENDINGS = {"eos": "complete", "repetition": "stopped repeating", "limit": "⚠ token limit", None: ""}


def shorten(text: str, chars: int = CELL_CHARS) -> str:
    """`text` on one line, cut to at most `chars` characters with an ellipsis where it was cut."""
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def utc_time(moment: datetime, seconds: bool = False) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def reply_row(reply: ReplyRecord) -> list:
    """One served reply as a row under REPLY_COLUMNS."""
    feedback = FEEDBACK_LABELS.get(reply.feedback, "")
    if reply.feedback_reason:
        feedback += f" {reply.feedback_reason}"
    measured = round(reply.measured_speedup, 2) if reply.measured_speedup is not None else None
    return [
        reply.id, utc_time(reply.created_at, seconds=True), shorten(reply.question),
        ENDINGS.get(reply.stop_reason, reply.stop_reason), reply.outcome or "", shorten(reply.outcome_reason, 160),
        reply.exact_hit,
        reply.speedup, feedback, VERIFIED_LABELS[reply.verified], measured,
    ]


def audit_row(record: AuditRecord) -> list:
    """One audit log row as a row under AUDIT_COLUMNS."""
    details = json.dumps(record.details, ensure_ascii=False) if record.details else ""
    return [
        record.id, utc_time(record.at, seconds=True), record.actor, record.action, record.entry_id, record.target,
        shorten(details, 300),
    ]


def row_picker(login: StaffLogin) -> Callable[[gr.SelectData, gr.Request], int]:
    """A table's select handler that returns the clicked row's id (its first column), for staff only."""

    def pick_row(evt: gr.SelectData, request: gr.Request) -> int:
        login.require(request)
        return int(evt.row_value[0])

    return pick_row


def confirmed_delete(label: str) -> gr.Button:
    """A delete button that only reveals a 'Really delete?' button; returns that one for the caller to wire."""
    delete = gr.Button(label, variant="stop")
    confirm = gr.Button("Really delete?", variant="stop", visible=False)
    delete.click(_reveal, None, [confirm], **PRIVATE)
    return confirm


def hidden_button() -> gr.Button:
    """What a delete handler returns for its confirm button: hidden again until the next delete click."""
    return gr.Button(visible=False)


def _reveal() -> gr.Button:
    return gr.Button(visible=True)


def parse_ids(text: str, limit: int = 10_000) -> list[int]:
    """Entry ids from "3, 7, 10-14"; ValueError with a message fit to show for anything else."""
    ids: list[int] = []
    for part in (p.strip() for p in (text or "").replace(";", ",").split(",")):
        if not part:
            continue
        first, _, last = part.partition("-")
        if not first.strip().isdigit() or (last and not last.strip().isdigit()):
            raise ValueError(f"Not an entry id or range: {part!r}. Write ids like 3, 7, 10-14.")
        low, high = int(first), int(last or first)
        if high < low or high - low >= limit:
            raise ValueError(f"The range {part} is reversed or too long.")
        ids.extend(range(low, high + 1))
    if not ids:
        raise ValueError("Enter at least one entry id.")
    return ids
