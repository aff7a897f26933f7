"""Wordings (aliases) of an entry's question: attached or confirmed by staff, or suggested from customers.

A customer question that an approved entry grounded is stored as a *suggested* wording; it matches nothing
until staff confirm it, so a wrong grounding never reinforces itself. Confirmed wordings are indexed (the
entry then scores by its best wording). Every write logs the owning entry in the change log, so each replica
re-reads that entry's wordings (cache/index_sync.py), and writes the row before this replica's index.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from cache import changes
from cache.backend import Backend
from cache.checks import get_or_raise
from cache.records import MergeResult, Suggestion, WordingRecord
from cache.schema import Entry, Reply, Wording, utc_now
from cache.text import normalize_question
from cache.vectors import to_bytes


class Wordings:
    """Reads go to the rows; writes commit the row and its change line, then reload the entry in the index."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def for_entry(self, entry_id: int) -> list[WordingRecord]:
        """The entry's wordings, confirmed first, oldest first within each."""
        statement = select(Wording).where(Wording.entry_id == entry_id).order_by(Wording.status, Wording.id)
        with self._backend.sessions() as session:
            return [wording_record(row) for row in session.scalars(statement)]

    def add(self, entry_id: int, question: str, status: str, created_by: str) -> WordingRecord | None:
        """Attach a wording; None when the entry already has it (as its question or a wording of at least this
        status). Confirming a wording that was only suggested promotes it. KeyError for an unknown entry."""
        question = " ".join(question.split())
        if not question:
            raise ValueError("a wording must not be empty")
        vector = self._backend.embedding.question(question)  # (dim,); memoized, so a suggestion costs nothing
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                row = attach(session, get_or_raise(session, Entry, entry_id), question, vector, status, created_by)
                changes.record(session, seq, entry_ids=[entry_id] if row is not None else [])
                added = wording_record(row) if row is not None else None
            if added is not None and status == "confirmed":
                self._reindex({entry_id})
        return added

    def set_confirmed(self, wording_ids: Iterable[int]) -> list[WordingRecord]:
        """Confirm suggested wordings (in bulk); returns the ones that were suggested and now match."""
        ids = sorted({int(i) for i in wording_ids})
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                rows = session.scalars(select(Wording).where(Wording.id.in_(ids), Wording.status == "suggested"))
                confirmed = []
                for row in rows.all():
                    row.status = "confirmed"
                    confirmed.append(wording_record(row))
                changes.record(session, seq, entry_ids={w.entry_id for w in confirmed})
            self._reindex({w.entry_id for w in confirmed})
        return confirmed

    def remove(self, wording_ids: Iterable[int]) -> list[WordingRecord]:
        """Delete wordings (drop suggestions, detach confirmed ones); returns the ones that existed."""
        ids = sorted({int(i) for i in wording_ids})
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                removed = [wording_record(r) for r in session.scalars(select(Wording).where(Wording.id.in_(ids)))]
                session.execute(delete(Wording).where(Wording.id.in_([w.id for w in removed])))
                changes.record(session, seq, entry_ids={w.entry_id for w in removed})
            self._reindex({w.entry_id for w in removed if w.status == "confirmed"})
        return removed

    def suggestions(self, limit: int) -> list[Suggestion]:
        """Suggested wordings waiting for staff, oldest first, with the entry each would match."""
        statement = (
            select(Wording, Entry.question, Entry.answer).join(Entry, Entry.id == Wording.entry_id)
            .where(Wording.status == "suggested").order_by(Wording.id).limit(limit)
        )
        with self._backend.sessions() as session:
            return [Suggestion(wording_record(row.Wording), row.question, row.answer)
                    for row in session.execute(statement)]

    def merge(self, kept_id: int, merged_id: int, actor: str) -> MergeResult:
        """Merge entry `merged_id` into `kept_id`: its question becomes a confirmed wording of the kept entry,
        its wordings and served replies move over, and it is deleted. KeyError for an unknown entry."""
        if kept_id == merged_id:
            raise ValueError("an entry cannot be merged into itself")
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                kept, merged = get_or_raise(session, Entry, kept_id), get_or_raise(session, Entry, merged_id)
                result = _merge_rows(session, kept, merged, actor)
                changes.record(session, seq, entry_ids=[kept_id, merged_id])
            self._reindex({kept_id, merged_id})
        return result

    def _reindex(self, entry_ids: set[int]) -> None:
        """Bring this replica's index up to the rows of these entries just written, and save it."""
        if entry_ids:
            self._backend.index.reload(entry_ids)
            self._backend.index.save()


def attach(
    session: Session, entry: Entry, question: str, vector: np.ndarray, status: str, created_by: str
) -> Wording | None:
    """The new (or promoted) wording row, or None when the entry already has this wording (used by import too)."""
    normalized = normalize_question(question)
    if normalized == entry.normalized_question:
        return None
    existing = session.scalar(
        select(Wording).where(Wording.entry_id == entry.id, Wording.normalized_question == normalized)
    )
    if existing is not None:
        if status != "confirmed" or existing.status == "confirmed":
            return None
        existing.status, existing.created_by = "confirmed", created_by or existing.created_by
        return existing
    row = Wording(
        entry_id=entry.id, question=question, normalized_question=normalized, embedding=to_bytes(vector),
        status=status, created_by=created_by, created_at=utc_now(),
    )
    session.add(row)
    session.flush()
    return row


def _merge_rows(session: Session, kept: Entry, merged: Entry, actor: str) -> MergeResult:
    """Move the merged entry's question, wordings and replies to the kept entry, then delete it."""
    have = {kept.normalized_question} | set(
        session.scalars(select(Wording.normalized_question).where(Wording.entry_id == kept.id))
    )
    moving = session.scalars(select(Wording).where(Wording.entry_id == merged.id)).all()
    duplicates = [w.id for w in moving if w.normalized_question in have]
    session.execute(delete(Wording).where(Wording.id.in_(duplicates)))
    moved = session.execute(
        update(Wording).where(Wording.entry_id == merged.id).values(entry_id=kept.id)
        .execution_options(synchronize_session=False)
    ).rowcount
    if merged.normalized_question not in have:
        session.add(Wording(
            entry_id=kept.id, question=merged.question, normalized_question=merged.normalized_question,
            embedding=merged.embedding, status="confirmed", created_by=actor, created_at=utc_now(),
        ))
        moved += 1
    replies = session.execute(
        update(Reply).where(Reply.entry_id == merged.id).values(entry_id=kept.id)
        .execution_options(synchronize_session=False)
    ).rowcount
    kept.hits, kept.uses, kept.updated_at = kept.hits + merged.hits, kept.uses + merged.uses, utc_now()
    session.execute(delete(Entry).where(Entry.id == merged.id))
    return MergeResult(kept.id, merged.id, moved, replies)


def wording_record(row: Wording) -> WordingRecord:
    return WordingRecord(row.id, row.entry_id, row.question, row.status, row.created_by, row.created_at)
