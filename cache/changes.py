"""The change log that keeps every replica's FAISS index in step with one shared database.

Each transaction that writes or deletes entries or articles first takes the next change number from the
one-row counter (`begin`), which row-locks the counter until commit: writers queue there, so numbers become
visible in the order they were given and a reader that has seen number n has seen everything below it.
It then logs what it touched (`record`). A replica remembers the newest number it applied and reads only
later rows (`read_since`): one indexed range query, usually empty. Log rows older than KEPT_CHANGES
numbers are pruned; a replica that fell that far behind rebuilds its index from the rows instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from cache.schema import Change, ChangeCounter

KEPT_CHANGES = 100_000


@dataclass(frozen=True)
class ChangeFeed:
    """What changed after a replica's last look."""

    seq: int  # the newest change number this feed covers
    entry_ids: set[int]  # written, edited or deleted entries: re-read their row, drop the id if it is gone
    articles_changed: bool
    complete: bool  # False when some changes were pruned: rebuild from the rows instead of replaying


def begin(session: Session) -> int:
    """Take the next change number; call it first in a writing transaction, so writers queue before any
    row lock and cannot deadlock on each other."""
    session.execute(update(ChangeCounter).where(ChangeCounter.id == 1).values(seq=ChangeCounter.seq + 1))
    seq = session.scalar(select(ChangeCounter.seq).where(ChangeCounter.id == 1))
    session.execute(delete(Change).where(Change.seq <= seq - KEPT_CHANGES))
    return seq


def record(session: Session, seq: int, entry_ids: Iterable[int] = (), article_ids: Iterable[str] = ()) -> None:
    session.add_all([Change(seq=seq, entry_id=int(i)) for i in entry_ids])
    session.add_all([Change(seq=seq, article_id=str(i)) for i in article_ids])


def latest(session: Session) -> int:
    return session.scalar(select(ChangeCounter.seq).where(ChangeCounter.id == 1)) or 0


def read_since(session: Session, seen: int) -> ChangeFeed:
    """Changes numbered above `seen`. The counter is read after the log, so `complete` errs towards rebuilding."""
    logged = session.execute(select(Change.seq, Change.entry_id, Change.article_id).where(Change.seq > seen)).all()
    newest = latest(session)
    if seen < newest - KEPT_CHANGES:
        return ChangeFeed(newest, set(), True, complete=False)
    return ChangeFeed(
        seq=max((row.seq for row in logged), default=seen),
        entry_ids={row.entry_id for row in logged if row.entry_id is not None},
        articles_changed=any(row.article_id is not None for row in logged),
        complete=True,
    )
