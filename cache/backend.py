"""What every part of AnswerCache shares: the sessions, one write lock, the embedder and this replica's vectors."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from cache.answer_vectors import AnswerVectors
from cache.article_vectors import ArticleVectors
from cache.index_sync import IndexSync
from cache.lexical import LexicalIndex
from cache.vectors import Embedding


@dataclass(frozen=True)
class Backend:
    """Passed to each part of the cache, so the parts hold no state of their own and share one lock."""

    engine: Engine
    sessions: sessionmaker
    lock: threading.RLock  # guards index and article-vector mutations and every write path
    embedding: Embedding
    index: IndexSync
    articles: ArticleVectors
    lexical: LexicalIndex
    answers: AnswerVectors  # approved answers' vectors, for a match that also compares the answer
    max_entries: int

    def catch_up(self) -> None:
        """Bring the index and article vectors up to every change any replica committed before this call."""
        with self.lock:
            if self.index.catch_up():
                self.articles.refresh()
