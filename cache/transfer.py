"""Export every entry and article to a JSON Lines file, and import one in a single transaction."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from cache import articles, changes, jsonl, rows
from cache.backend import Backend
from cache.entries import evict_over_limit, upsert_row
from cache.schema import Entry, Wording, utc_now
from cache.vectors import article_text
from cache.wordings import attach


class Transfer:
    """The line format lives in cache/jsonl.py; this part reads and writes the rows and the index."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def export_jsonl(self, path: str | Path) -> int:
        """Write every entry and article as one JSON object per line; returns the number of lines."""
        with self._backend.sessions() as session:
            entries = session.scalars(select(Entry).options(defer(Entry.embedding)).order_by(Entry.id)).all()
            wordings = _confirmed_texts(session)
            lines = [jsonl.entry_line(rows.cached_answer(entry), wordings.get(entry.id, [])) for entry in entries]
        lines += [jsonl.article_line(article) for article in articles.Articles(self._backend).list_all()]
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        Path(path).write_text(text, encoding="utf-8")
        return len(lines)

    def import_jsonl(self, path: str | Path, approve: bool) -> int:
        """Add (or update) the records of an export; a bad line imports nothing. Returns the records read."""
        entries, imported_articles = jsonl.parse_lines(Path(path).read_text(encoding="utf-8").splitlines())
        if approve:
            entries = [replace(item, answer=replace(item.answer, review="approved")) for item in entries]
        entry_vectors = self._backend.embedding.texts([item.answer.question for item in entries])  # (n, dim)
        wording_texts = [" ".join(text.split()) for item in entries for text in item.wordings]
        wording_vectors = dict(zip(wording_texts, self._backend.embedding.texts(wording_texts), strict=True))
        article_vectors = self._backend.embedding.texts([article_text(a.title, a.body) for a in imported_articles])
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                vector_by_id = _store_entries(session, entries, entry_vectors, wording_vectors)
                for item, vector in zip(imported_articles, article_vectors, strict=True):
                    articles.upsert_row(session, item.id, item.title, item.body, vector)
                changes.record(session, seq, vector_by_id, [item.id for item in imported_articles])
            self._update_vectors(vector_by_id)
            self._backend.index.reload(set(vector_by_id))  # with their imported wordings
            self._backend.index.save()
        return len(entries) + len(imported_articles)

    def _update_vectors(self, vector_by_id: dict[int, np.ndarray]) -> None:
        """After the commit: the index, eviction over the limit, and the article vectors."""
        if vector_by_id:
            self._backend.index.add(list(vector_by_id), np.stack(list(vector_by_id.values())))
        evict_over_limit(self._backend)
        self._backend.index.save()
        self._backend.articles.refresh()


def _store_entries(
    session: Session, entries: list[jsonl.ImportedEntry], vectors: np.ndarray, wordings: dict[str, np.ndarray]
) -> dict[int, np.ndarray]:
    """Upsert every imported entry and attach its confirmed wordings; one vector per id, since a file may
    repeat an exact key."""
    vector_by_id = {}
    for item, vector in zip(entries, vectors, strict=True):
        entry = _import_row(session, item, vector)
        for text in item.wordings:
            text = " ".join(text.split())
            if text:
                attach(session, entry, text, wordings[text], "confirmed", "import")
        vector_by_id[entry.id] = vector
    return vector_by_id


def _confirmed_texts(session: Session) -> dict[int, list[str]]:
    """Entry id -> its confirmed wordings, oldest first."""
    statement = select(Wording.entry_id, Wording.question).where(Wording.status == "confirmed").order_by(Wording.id)
    found: dict[int, list[str]] = {}
    for row in session.execute(statement):
        found.setdefault(row.entry_id, []).append(row.question)
    return found


def _import_row(session: Session, item: jsonl.ImportedEntry, vector: np.ndarray) -> Entry:
    """An upserted entry that keeps the file's counts, dates and review, even for unchanged text."""
    entry = upsert_row(session, item.answer, vector)
    entry.review = item.answer.review
    entry.hits, entry.uses = item.hits, item.uses
    entry.created_at = item.created_at or entry.created_at
    entry.last_used_at = item.last_used_at or utc_now()
    return entry
