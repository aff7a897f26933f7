"""This replica's FAISS index of question vectors, kept in step with the shared database.

The database is the source of truth. Writers commit the row first and then update and save the index;
`open` rebuilds the index whenever its ids disagree with the rows, so a crash between the two loses nothing.
Beside the index file a sequence file holds the newest change number (cache/changes.py) the saved index
has seen; `catch_up` replays only the changes numbered after it, or rebuilds when too many came.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cache import changes
from cache.schema import Entry
from cache.vector_index import IndexHit, VectorIndex
from cache.vectors import stack

INDEX_FILE = "questions.faiss"
SEEN_FILE = "questions.faiss.seq"  # the newest change number the saved index holds
MAX_REPLAYED_IDS = 1000  # more changed entries than this at once: rebuild rather than a huge IN (...)


class IndexSync:
    """The index, its file and the change number it holds; not locked itself, so callers serialize use."""

    def __init__(self, sessions: sessionmaker, dim: int, index_path: Path) -> None:
        self._sessions = sessions
        self.dim = dim
        self._path = index_path
        self._index = VectorIndex(dim)
        self._seen_seq = 0  # the newest change number replayed into self._index

    def open(self, rebuild: bool) -> None:
        """Use the saved index if it holds exactly the database's ids (then replay what it has not seen),
        else rebuild it from the rows."""
        index = VectorIndex.load(self._path, self.dim)
        seen = _read_seq(self._seq_path())
        with self._sessions() as session:
            entry_ids = set(session.scalars(select(Entry.id)))
            latest = changes.latest(session)
        # A number beyond the database's own means the file belongs to another database: rebuild then too.
        in_step = seen is not None and seen <= latest and index.ids() == entry_ids
        if rebuild or not self._path.exists() or not in_step:
            self.rebuild()
            return
        self._index, self._seen_seq = index, seen
        self.catch_up()

    def catch_up(self) -> bool:
        """Replay every change committed since the last look, by any replica; True when articles may have
        changed too (the caller's article vectors then need a refresh). One indexed query when nothing did."""
        with self._sessions() as session:
            feed = changes.read_since(session, self._seen_seq)
            replay = feed.complete and len(feed.entry_ids) <= MAX_REPLAYED_IDS
            stored = _embeddings(session, feed.entry_ids) if replay else []
        if not replay:
            self.rebuild()
            return True
        self._index.remove(feed.entry_ids - {row.id for row in stored})  # deleted meanwhile
        self._add_rows(stored)
        self._seen_seq = feed.seq
        return feed.articles_changed

    def rebuild(self) -> None:
        """A fresh index from every stored embedding, saved."""
        with self._sessions() as session:
            seq = changes.latest(session)  # read before the rows: later changes are replayed, harmlessly
            stored = session.execute(select(Entry.id, Entry.embedding)).all()
        self._index, self._seen_seq = VectorIndex(self.dim), seq
        self._add_rows(stored)
        self.save()

    def save(self) -> None:
        """The index first, then the change number it holds: a crash between the two only replays more."""
        self._index.save(self._path)
        _write_atomically(self._seq_path(), str(self._seen_seq))

    def add(self, ids: list[int], vectors: np.ndarray) -> None:
        self._index.add(ids, vectors)

    def remove(self, ids: list[int]) -> None:
        self._index.remove(ids)

    def search(self, query: np.ndarray, k: int) -> list[IndexHit]:
        return self._index.search(query, k)

    def ids(self) -> set[int]:
        return self._index.ids()

    def __len__(self) -> int:
        return len(self._index)

    def _add_rows(self, stored: list) -> None:
        if stored:
            self._index.add([row.id for row in stored], stack([row.embedding for row in stored], self.dim))

    def _seq_path(self) -> Path:
        return self._path.with_name(SEEN_FILE)


def _embeddings(session: Session, ids: set[int]) -> list:
    """(id, embedding) rows of the entries among `ids` that still exist."""
    if not ids:
        return []
    return session.execute(select(Entry.id, Entry.embedding).where(Entry.id.in_(ids))).all()


def _read_seq(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _write_atomically(path: Path, text: str) -> None:
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)
