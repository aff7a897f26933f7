"""The helpers the admin tabs share: one way to shorten text, one row per reply under one set of columns."""

from datetime import UTC, datetime

from chatbot import ReplyRecord
from webui.widgets import REPLY_COLUMNS, reply_row, shorten


def reply(**fields) -> ReplyRecord:
    values = dict(
        id=5, entry_id=1, question="How do I\n  reset it?", answer="a", history=[], stats={},
        speedup=1.7, seconds=1.0, greedy_seconds=1.7, prompt_ids=[1], token_ids=[2],
        reference_entry_ids=[], exact_hit=False, feedback=None, feedback_reason="", verified=None,
        measured_speedup=None, session_id="", created_at=datetime(2026, 11, 1, 9, 30, 15, tzinfo=UTC),
    )
    return ReplyRecord(**{**values, **fields})


def test_shorten_puts_text_on_one_line_and_marks_the_cut():
    assert shorten("a\n  b\tc", 10) == "a b c"
    assert shorten("x" * 10, 10) == "x" * 10
    assert shorten("x" * 11, 10) == "x" * 9 + "…"


def test_reply_row_fills_every_column():
    row = dict(zip(REPLY_COLUMNS, reply_row(reply()), strict=True))
    assert row == {
        "reply id": 5, "time (UTC)": "2026-11-01 09:30:15", "question": "How do I reset it?", "ended": "",
        "shown": "", "why": "", "exact hit": False,
        "speedup": 1.7, "feedback": "", "verified": "", "measured speedup": None,
    }


def test_reply_row_says_what_was_shown_and_why():
    row = reply_row(reply(outcome="cut", outcome_reason="sentence 2: '99 GB' is in no source"))
    named = dict(zip(REPLY_COLUMNS, row, strict=True))
    assert (named["shown"], named["why"]) == ("cut", "sentence 2: '99 GB' is in no source")


def test_reply_row_says_feedback_and_verdict():
    row = reply_row(reply(feedback=-1, feedback_reason="too long", verified=False, measured_speedup=1.234))
    named = dict(zip(REPLY_COLUMNS, row, strict=True))
    assert (named["feedback"], named["verified"], named["measured speedup"]) == ("down too long", "DIFFERS", 1.23)
    assert dict(zip(REPLY_COLUMNS, reply_row(reply(verified=True)), strict=True))["verified"] == "identical"


def test_reply_row_flags_a_reply_that_hit_the_token_limit():
    ended = {reason: dict(zip(REPLY_COLUMNS, reply_row(reply(stop_reason=reason)), strict=True))["ended"]
             for reason in ("eos", "repetition", "limit")}
    assert ended == {"eos": "complete", "repetition": "stopped repeating", "limit": "⚠ token limit"}
