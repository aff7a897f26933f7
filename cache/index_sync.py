"""This replica's FAISS indexes of question vectors, kept in step with the shared database.

Two indexes: one vector per entry (its own question, keyed by entry id) and one per confirmed wording
(keyed by wording id, with the entry each belongs to). A search scores an entry by its best wording.

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
from cache.schema import Entry, Wording
from cache.vector_index import IndexHit, VectorIndex
from cache.vectors import stack

INDEX_FILE = "questions.faiss"
WORDINGS_FILE = "wordings.faiss"  # confirmed wordings, beside the entries' index
SEEN_FILE = "questions.faiss.seq"  # the newest change number the saved indexes hold
WORDINGS_PER_ENTRY = 4  # wordings searched per entry wanted, so one entry's many wordings crowd out no other
MAX_REPLAYED_IDS = 1000  # more changed entries than this at once: rebuild rather than a huge IN (...)


class IndexSync:
    """The index, its file and the change number it holds; not locked itself, so callers serialize use."""

    def __init__(self, sessions: sessionmaker, dim: int, index_path: Path) -> None:
        self._sessions = sessions
        self.dim = dim
        self._path = index_path
        self._index = VectorIndex(dim)
        self._wordings = VectorIndex(dim)
        self._owner: dict[int, int] = {}  # wording id -> entry id, for every wording in self._wordings
        self._seen_seq = 0  # the newest change number replayed into the indexes

    @property
    def seen_seq(self) -> int:
        """The newest change number the indexes hold: what derived indexes (the lexical one) compare with."""
        return self._seen_seq

    def open(self, rebuild: bool) -> None:
        """Use the saved index if it holds exactly the database's ids (then replay what it has not seen),
        else rebuild it from the rows."""
        index = VectorIndex.load(self._path, self.dim)
        wordings = VectorIndex.load(self._wordings_path(), self.dim)
        seen = _read_seq(self._seq_path())
        with self._sessions() as session:
            entry_ids = set(session.scalars(select(Entry.id)))
            owner = _confirmed_owners(session)
            latest = changes.latest(session)
        # A number beyond the database's own means the file belongs to another database: rebuild then too.
        in_step = seen is not None and seen <= latest and index.ids() == entry_ids and wordings.ids() == set(owner)
        if rebuild or not self._path.exists() or not in_step:
            self.rebuild()
            return
        self._index, self._wordings, self._owner, self._seen_seq = index, wordings, owner, seen
        self.catch_up()

    def catch_up(self) -> bool:
        """Replay every change committed since the last look, by any replica; True when articles may have
        changed too (the caller's article vectors then need a refresh). One indexed query when nothing did."""
        with self._sessions() as session:
            feed = changes.read_since(session, self._seen_seq)
        if not feed.complete or len(feed.entry_ids) > MAX_REPLAYED_IDS:
            self.rebuild()
            return True
        self.reload(feed.entry_ids)
        self._seen_seq = feed.seq
        return feed.articles_changed

    def reload(self, entry_ids: set[int]) -> None:
        """Re-read these entries' vectors and confirmed wordings from their rows (dropping deleted ones)."""
        if not entry_ids:
            return
        with self._sessions() as session:
            stored = _embeddings(session, entry_ids)
            wordings = _confirmed_wordings(session, entry_ids)
        self.remove(entry_ids - {row.id for row in stored})  # deleted meanwhile
        self._remove_wordings_of(entry_ids)
        self._add_rows(stored)
        self._add_wordings(wordings)

    def rebuild(self) -> None:
        """A fresh index from every stored embedding, saved."""
        with self._sessions() as session:
            seq = changes.latest(session)  # read before the rows: later changes are replayed, harmlessly
            stored = session.execute(select(Entry.id, Entry.embedding)).all()
            wordings = _confirmed_wordings(session, None)
        self._index, self._seen_seq = VectorIndex(self.dim), seq
        self._wordings, self._owner = VectorIndex(self.dim), {}
        self._add_rows(stored)
        self._add_wordings(wordings)
        self.save()

    def save(self) -> None:
        """The indexes first, then the change number they hold: a crash between the two only replays more."""
        self._index.save(self._path)
        self._wordings.save(self._wordings_path())
        _write_atomically(self._seq_path(), str(self._seen_seq))

    def add(self, ids: list[int], vectors: np.ndarray) -> None:
        self._index.add(ids, vectors)

    def remove(self, ids: set[int] | list[int]) -> None:
        """Drop entries and their wordings."""
        self._index.remove(ids)
        self._remove_wordings_of(set(ids))

    def search(self, query: np.ndarray, k: int) -> list[IndexHit]:
        """The `k` entries nearest to a (dim,) query, each scored by its best wording (its question included)."""
        best: dict[int, float] = {}
        for hit in self._index.search(query, k):
            best[hit.id] = hit.score
        for hit in self._wordings.search(query, WORDINGS_PER_ENTRY * k):  # one entry may own several
            entry_id = self._owner.get(hit.id)
            if entry_id is not None and hit.score > best.get(entry_id, -2.0):
                best[entry_id] = hit.score
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
        return [IndexHit(entry_id, score) for entry_id, score in ranked[:k]]

    def ids(self) -> set[int]:
        return self._index.ids()

    def __len__(self) -> int:
        return len(self._index)

    def _add_rows(self, stored: list) -> None:
        if stored:
            self._index.add([row.id for row in stored], stack([row.embedding for row in stored], self.dim))

    def _add_wordings(self, wordings: list) -> None:
        if wordings:
            self._wordings.add([row.id for row in wordings], stack([row.embedding for row in wordings], self.dim))
            self._owner.update({row.id: row.entry_id for row in wordings})

    def _remove_wordings_of(self, entry_ids: set[int]) -> None:
        gone = [wording_id for wording_id, entry_id in self._owner.items() if entry_id in entry_ids]
        self._wordings.remove(gone)
        for wording_id in gone:
            del self._owner[wording_id]

    def _seq_path(self) -> Path:
        return self._path.with_name(SEEN_FILE)

    def _wordings_path(self) -> Path:
        return self._path.with_name(WORDINGS_FILE)


def _embeddings(session: Session, ids: set[int]) -> list:
    """(id, embedding) rows of the entries among `ids` that still exist."""
    if not ids:
        return []
    return session.execute(select(Entry.id, Entry.embedding).where(Entry.id.in_(ids))).all()


def _confirmed_wordings(session: Session, entry_ids: set[int] | None) -> list:
    """(id, entry_id, embedding) rows of the confirmed wordings of `entry_ids` (None: of every entry)."""
    statement = select(Wording.id, Wording.entry_id, Wording.embedding).where(Wording.status == "confirmed")
    if entry_ids is not None:
        statement = statement.where(Wording.entry_id.in_(entry_ids))
    return session.execute(statement).all()


def _confirmed_owners(session: Session) -> dict[int, int]:
    rows = session.execute(select(Wording.id, Wording.entry_id).where(Wording.status == "confirmed")).all()
    return {row.id: row.entry_id for row in rows}


def _read_seq(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _write_atomically(path: Path, text: str) -> None:
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)
