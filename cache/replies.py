"""Served chat turns: storing one, its feedback and verification, and listing them for staff."""

from __future__ import annotations

import math

from sqlalchemy import Select, select

from cache import rows
from cache.backend import Backend
from cache.checks import check_page, get_or_raise
from cache.records import NewReply, ReplyRecord
from cache.schema import Entry, Reply, utc_now


class Replies:
    """Replies are never indexed, so they need the database and the write lock only."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def record(self, new: NewReply) -> int:
        """Store a served turn; an `entry_id` whose entry was evicted meanwhile is stored as None."""
        with self._backend.lock, self._backend.sessions.begin() as session:
            entry_id = new.entry_id
            # FOR KEY SHARE on PostgreSQL: a replica deleting the entry now waits until this reply is stored.
            key_share = {"read": True, "key_share": True}
            if entry_id is not None and session.get(Entry, entry_id, with_for_update=key_share) is None:
                entry_id = None
            reply = new_row(new, entry_id)
            session.add(reply)
            session.flush()
            return reply.id

    def set_feedback(self, reply_id: int, value: int, reason: str) -> None:
        """Record a thumbs up (+1) or down (-1), or clear the rating (0); KeyError for an unknown reply."""
        if isinstance(value, bool) or value not in (-1, 0, 1):
            raise ValueError(f"feedback must be -1, 0 or 1, got {value!r}")
        with self._backend.lock, self._backend.sessions.begin() as session:
            reply = get_or_raise(session, Reply, reply_id)
            reply.feedback = value or None
            reply.feedback_reason = reason if value else ""

    def set_verification(self, reply_id: int, identical: bool, measured_speedup: float) -> None:
        """Record whether a greedy re-run matched the reply, and the speedup measured against it."""
        if not math.isfinite(measured_speedup) or measured_speedup <= 0:
            raise ValueError(f"measured_speedup must be a positive number, got {measured_speedup!r}")
        with self._backend.lock, self._backend.sessions.begin() as session:
            reply = get_or_raise(session, Reply, reply_id)
            reply.verified = bool(identical)
            reply.measured_speedup = float(measured_speedup)

    def get(self, reply_id: int) -> ReplyRecord | None:
        with self._backend.sessions() as session:
            reply = session.get(Reply, reply_id)
            return rows.reply_record(reply) if reply is not None else None

    def for_entry(self, entry_id: int) -> list[ReplyRecord]:
        """Replies served from or stored as this entry, newest first."""
        return self._newest_first(select(Reply).where(Reply.entry_id == entry_id))

    def recent(self, limit: int, offset: int, outcomes: tuple[str, ...] = ()) -> list[ReplyRecord]:
        """The newest replies; with `outcomes`, only those the customer got one of (cut or handed off, say)."""
        check_page(limit, offset)
        statement = select(Reply).where(Reply.outcome.in_(outcomes)) if outcomes else select(Reply)
        return self._newest_first(statement, limit, offset)

    def _newest_first(self, statement: Select, limit: int | None = None, offset: int = 0) -> list[ReplyRecord]:
        statement = statement.order_by(Reply.created_at.desc(), Reply.id.desc()).offset(offset).limit(limit)
        with self._backend.sessions() as session:
            return [rows.reply_record(reply) for reply in session.scalars(statement)]


def new_row(new: NewReply, entry_id: int | None) -> Reply:
    """The row of a served turn; the stats blob is kept for display, the typed fields are what cache reads."""
    return Reply(
        entry_id=entry_id,
        question=new.question,
        answer=new.answer,
        history=list(new.history),
        stats=dict(new.stats),
        speedup=new.speedup,
        seconds=new.seconds,
        greedy_seconds=new.greedy_seconds,
        tokens_per_forward_pass=new.tokens_per_forward_pass,
        stop_reason=new.stop_reason,
        prompt_ids=_ints(new.prompt_ids),
        token_ids=_ints(new.token_ids),
        reference_entry_ids=[int(i) for i in new.reference_entry_ids],
        exact_hit=new.exact_hit,
        backed=new.backed,
        outcome=new.outcome,
        outcome_reason=new.outcome_reason,
        feedback=None,
        feedback_reason="",
        session_id=new.session_id,
        created_at=utc_now(),
    )


def _ints(values: list[int] | None) -> list[int] | None:
    return [int(i) for i in values] if values is not None else None
