"""Knowledge-base articles: stored with their vector, logged as changes, found by meaning."""

from __future__ import annotations

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, defer

from cache import changes, rows
from cache.backend import Backend
from cache.checks import check_threshold
from cache.records import ArticleHit, ArticleRecord
from cache.schema import Article, utc_now
from cache.vectors import article_text, to_bytes


class Articles:
    """Article writes refresh this replica's article vectors; other replicas catch up from the change log."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def upsert(self, article_id: str, title: str, body: str) -> ArticleRecord:
        """Create or replace an article, embedding its title and body."""
        if not article_id.strip():
            raise ValueError("article id must not be empty")
        vector = self._backend.embedding.texts([article_text(title, body)])[0]
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                record = rows.article_record(upsert_row(session, article_id, title, body, vector))
                changes.record(session, seq, article_ids=[article_id])
            self._backend.articles.refresh()
        return record

    def delete(self, article_id: str) -> bool:
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                deleted = session.execute(delete(Article).where(Article.id == article_id)).rowcount > 0
                changes.record(session, seq, article_ids=[article_id] if deleted else [])
            self._backend.articles.refresh()
        return deleted

    def get(self, article_id: str) -> ArticleRecord | None:
        with self._backend.sessions() as session:
            article = session.get(Article, article_id)
            return rows.article_record(article) if article is not None else None

    def list_all(self) -> list[ArticleRecord]:
        with self._backend.sessions() as session:
            articles = session.scalars(select(Article).options(defer(Article.embedding)).order_by(Article.id))
            return [rows.article_record(article) for article in articles]

    def best(self, question: str, threshold: float) -> ArticleHit | None:
        """The article closest in meaning to `question`, if it scores >= `threshold`."""
        ranked = self.ranked(question, 1, threshold)
        return ranked[0] if ranked else None

    def ranked(self, question: str, k: int, threshold: float) -> list[ArticleHit]:
        """The `k` articles closest in meaning to `question` that score >= `threshold`, closest first."""
        check_threshold(threshold)
        self._backend.catch_up()
        hits = []
        for article_id, score in self._backend.articles.ranked(self._backend.embedding.question(question), k):
            article = self.get(article_id) if score >= threshold else None  # None: deleted by another replica
            if article is not None:
                hits.append(ArticleHit(article.id, article.title, article.body, score))
        return hits


def upsert_row(session: Session, article_id: str, title: str, body: str, vector: np.ndarray) -> Article:
    """The article row with this id, created or overwritten."""
    article = session.get(Article, article_id)
    now = utc_now()
    if article is None:
        article = Article(id=article_id, created_at=now)
        session.add(article)
    article.title, article.body = title, body
    article.embedding = to_bytes(vector)
    article.updated_at = now
    return article
