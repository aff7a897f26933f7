"""Staff edits of cached answers: change the text, set the review state, delete."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sqlalchemy import delete, select, update

from cache import changes, rows
from cache.backend import Backend
from cache.checks import check_review, get_or_raise
from cache.records import CachedAnswer
from cache.schema import Entry, utc_now
from cache.text import normalize_question
from cache.vectors import to_bytes


class Editing:
    """Each edit commits the row (and its change log line) before it touches this replica's index."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def update_entry(
        self, entry_id: int, question: str | None, answer: str | None, answer_ids: list[int] | None, review: str | None
    ) -> CachedAnswer:
        """Edit an entry; a new question is re-embedded. KeyError for an unknown id."""
        if review is not None:
            check_review(review)
        if answer is not None and answer_ids is None:
            raise ValueError("a new answer needs its answer_ids too: the cache cannot tokenize")
        vector = self._backend.embedding.texts([question]) if question is not None else None  # (1, dim)
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                entry = get_or_raise(session, Entry, entry_id)
                _edit(entry, question, vector, answer, answer_ids, review)
                updated = rows.cached_answer(entry)
                changes.record(session, seq, entry_ids=[entry_id])
            if vector is not None:
                self._backend.index.add([entry_id], vector)
                self._backend.index.save()
        return updated

    def set_review(self, entry_ids: Iterable[int], review: str) -> list[int]:
        """Put entries into a review state; returns the ids that exist. Lookups read the state from the rows,
        so every replica sees it at once; the change is logged all the same, since each replica's lexical
        index (approved entries only, cache/lexical.py) is rebuilt when the log moves."""
        check_review(review)
        ids = sorted({int(i) for i in entry_ids})
        if not ids:
            return []
        with self._backend.lock, self._backend.sessions.begin() as session:
            seq = changes.begin(session)
            found = list(session.scalars(select(Entry.id).where(Entry.id.in_(ids)).order_by(Entry.id)))
            session.execute(
                update(Entry).where(Entry.id.in_(found)).values(review=review, updated_at=utc_now())
                .execution_options(synchronize_session=False)
            )
            changes.record(session, seq, entry_ids=found)
        return found

    def delete_entry(self, entry_id: int) -> bool:
        """Delete the row first, then its vector; replies keep their text with entry_id set to None."""
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                deleted = session.execute(delete(Entry).where(Entry.id == entry_id)).rowcount > 0
                changes.record(session, seq, entry_ids=[entry_id] if deleted else [])
            if deleted:
                self._backend.index.remove([entry_id])
                self._backend.index.save()
        return deleted


def _edit(
    entry: Entry, question: str | None, vector: np.ndarray | None, answer: str | None, answer_ids: list[int] | None,
    review: str | None,
) -> None:
    """Set the fields that were given; `vector` is the (1, dim) embedding of a new question."""
    if question is not None and vector is not None:
        entry.question = question
        entry.normalized_question = normalize_question(question)
        entry.embedding = to_bytes(vector[0])
    if answer is not None:
        entry.answer = answer
    if answer_ids is not None:
        entry.answer_ids = [int(i) for i in answer_ids]
    if review is not None:
        entry.review = review
    entry.updated_at = utc_now()
