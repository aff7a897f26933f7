"""Approved entries' answers as vectors: a customer's rewording often shares more with the answer's words than
with the question staff wrote (measured: the best of question and answer finds the right approved entry for 85%
of the shipped rewordings, the question alone for 71%).

Held in memory per replica and refreshed when the change log moved, like the lexical index; an answer already
embedded (same entry, same text) is reused, so a refresh embeds only new or edited answers.
Cost: a refresh reads every approved (id, answer) row; a query is one (n, dim) x (dim,) product.
"""

from __future__ import annotations

import threading

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from cache.schema import Entry
from cache.vectors import Embedding


class AnswerVectors:
    """A snapshot (seq, ids, (n, dim) vectors) replaced whole, so readers need no lock."""

    def __init__(self, sessions: sessionmaker, embedding: Embedding) -> None:
        self._sessions = sessions
        self._embedding = embedding
        self._known: dict[int, tuple[str, np.ndarray]] = {}  # entry id -> (answer text, its vector)
        self._snapshot: tuple[int, list[int], np.ndarray] = (-1, [], np.zeros((0, embedding.dim), np.float32))
        self._refreshing = threading.Lock()

    def scores(self, query: np.ndarray, seq: int) -> dict[int, float]:
        """Cosine of a (dim,) query with every approved answer, as of change number `seq`."""
        if self._snapshot[0] != seq:
            self._refresh(seq)
        _, ids, vectors = self._snapshot
        return dict(zip(ids, (vectors @ query).tolist(), strict=True)) if ids else {}  # (n,)

    def _refresh(self, seq: int) -> None:
        with self._refreshing:
            if self._snapshot[0] == seq:
                return
            with self._sessions() as session:
                rows = session.execute(select(Entry.id, Entry.answer).where(Entry.review == "approved")).all()
            fresh = [row for row in rows if self._known.get(row.id, ("",))[0] != row.answer]
            vectors = self._embedding.texts([row.answer for row in fresh])  # (new, dim)
            self._known = {row.id: self._known[row.id] for row in rows if row not in fresh}
            self._known.update({row.id: (row.answer, vector) for row, vector in zip(fresh, vectors, strict=True)})
            ids = [row.id for row in rows]
            matrix = np.stack([self._known[i][1] for i in ids]) if ids else np.zeros((0, self._embedding.dim))
            self._snapshot = (seq, ids, matrix.astype(np.float32))
