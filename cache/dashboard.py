"""Dashboard numbers computed from plain reply rows, kept apart from the database code."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from cache.records import HANDED_OFF, DashboardStats, QuestionCount
from cache.text import normalize_question

TOP_QUESTIONS = 10


class Timing(Protocol):
    speedup: float | None
    seconds: float | None
    greedy_seconds: float | None


class ReplyRow(Timing, Protocol):
    question: str
    reference_entry_ids: list[int]
    stop_reason: str | None
    exact_hit: bool
    feedback: int | None
    backed: bool | None


def summarize(replies: Sequence[ReplyRow], entries: int, articles: int) -> DashboardStats:
    """Hit rates, speedups and seconds saved over every reply served."""
    count = len(replies)
    exact_hits = sum(1 for reply in replies if reply.exact_hit)
    referenced = sum(1 for reply in replies if reply.reference_entry_ids)
    unreferenced = [reply for reply in replies if not reply.exact_hit and not reply.reference_entry_ids]
    unbacked = [reply for reply in replies if reply.backed is False]
    speedups = [reply.speedup for reply in replies if reply.speedup is not None]
    return DashboardStats(
        entries=entries,
        articles=articles,
        replies=count,
        exact_hits=exact_hits,
        exact_hit_rate=exact_hits / count if count else 0.0,
        reference_hit_rate=referenced / count if count else 0.0,
        mean_speedup=statistics.fmean(speedups) if speedups else None,
        median_speedup=statistics.median(speedups) if speedups else None,
        seconds_saved=sum(seconds_saved(reply) for reply in replies),
        positive_feedback=sum(1 for reply in replies if reply.feedback == 1),
        negative_feedback=sum(1 for reply in replies if reply.feedback == -1),
        top_questions=top_questions(replies),
        replies_without_references=len(unreferenced),
        top_unreferenced_questions=top_questions(unreferenced),
        replies_not_backed=len(unbacked),
        top_unbacked_questions=top_questions(unbacked),
        replies_handed_off=sum(1 for reply in unbacked if reply.stop_reason == HANDED_OFF),
    )


def top_questions(replies: Sequence[ReplyRow], limit: int = TOP_QUESTIONS) -> list[QuestionCount]:
    """The most asked questions, grouped by normalized text and shown as first asked."""
    counts = Counter(normalize_question(reply.question) for reply in replies)
    first_asked: dict[str, str] = {}
    for reply in replies:
        first_asked.setdefault(normalize_question(reply.question), reply.question)
    return [QuestionCount(first_asked[key], n) for key, n in counts.most_common(limit)]


def seconds_saved(reply: Timing) -> float:
    """Estimated greedy time minus the time the reply took; 0 when either is unknown."""
    if reply.greedy_seconds is None or reply.seconds is None:
        return 0.0
    return reply.greedy_seconds - reply.seconds

