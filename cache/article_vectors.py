"""Every article's vector in one in-memory matrix: a few hundred articles need no FAISS index."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from cache.schema import Article
from cache.vectors import stack


class ArticleVectors:
    """A snapshot of (ids, vectors) replaced whole on refresh, so readers need no lock."""

    def __init__(self, sessions: sessionmaker, dim: int) -> None:
        self._sessions = sessions
        self.dim = dim
        self._snapshot: tuple[list[str], np.ndarray] = ([], np.zeros((0, dim), dtype=np.float32))

    def refresh(self) -> None:
        """Re-read every article's stored vector."""
        with self._sessions() as session:
            stored = session.execute(select(Article.id, Article.embedding).order_by(Article.id)).all()
        self._snapshot = ([row.id for row in stored], stack([row.embedding for row in stored], self.dim))

    def best(self, query: np.ndarray) -> tuple[str, float] | None:
        """The id and cosine score of the article closest to a (dim,) query; None when there is none."""
        ranked = self.ranked(query, 1)
        return ranked[0] if ranked else None

    def ranked(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ids and cosine scores of the `k` articles closest to a (dim,) query, closest first."""
        article_ids, vectors = self._snapshot  # one read: (n,) ids and (n, dim) vectors
        scores = vectors @ query  # (n,)
        order = np.argsort(-scores, kind="stable")[:k]
        return [(article_ids[i], float(np.clip(scores[i], -1.0, 1.0))) for i in order]
