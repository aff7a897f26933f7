"""Read-only queries behind the staff pages: entries page by page, the dashboard totals and the reply series."""

from __future__ import annotations

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import defer

from cache import dashboard, rows
from cache.backend import Backend
from cache.checks import check_page, check_review
from cache.records import CachedAnswer, DashboardStats, EntryPage
from cache.schema import Article, Entry, Reply

# The one list of ways to sort entries; the admin page offers them in this order.
SORT_COLUMNS = {"date": Entry.created_at, "hits": Entry.hits, "speedup": Entry.speedup, "uses": Entry.uses}
SORTS = tuple(SORT_COLUMNS)


class Browse:
    """Reads only: no lock and no index, since the rows are the truth every replica shares."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def get_entry(self, entry_id: int) -> CachedAnswer | None:
        with self._backend.sessions() as session:
            entry = session.get(Entry, entry_id)
            return rows.cached_answer(entry) if entry is not None else None

    def list_entries(
        self, search: str, sort: str, descending: bool, limit: int, offset: int, review: str | None
    ) -> EntryPage:
        """One page of the entries `_matching` the filters, sorted by one of SORTS."""
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {SORTS}, got {sort!r}")
        check_page(limit, offset)
        matches = _matching(search, review)
        column = SORT_COLUMNS[sort]
        order = (column.desc(), Entry.id.desc()) if descending else (column.asc(), Entry.id.asc())
        # Entries with no speedup (imported, seeded) come last either way, on every database.
        page = matches.order_by(column.is_(None), *order).limit(limit).offset(offset)
        with self._backend.sessions() as session:
            total = session.scalar(select(func.count()).select_from(matches.subquery()))
            entries = session.scalars(page).all()
            return EntryPage([rows.cached_answer(entry) for entry in entries], total)

    def dashboard_stats(self) -> DashboardStats:
        with self._backend.sessions() as session:
            entries = session.scalar(select(func.count(Entry.id)))
            articles = session.scalar(select(func.count(Article.id)))
            replies = session.execute(
                select(
                    Reply.question, Reply.speedup, Reply.seconds, Reply.greedy_seconds, Reply.reference_entry_ids,
                    Reply.exact_hit, Reply.feedback, Reply.backed, Reply.stop_reason,
                )
            ).all()
        return dashboard.summarize(replies, entries, articles)

    def reply_series(self) -> list[dict]:
        """One plot point per reply, oldest first."""
        columns = (Reply.created_at, Reply.speedup, Reply.seconds, Reply.greedy_seconds, Reply.tokens_per_forward_pass)
        with self._backend.sessions() as session:
            points = session.execute(select(*columns).order_by(Reply.created_at, Reply.id)).all()
        return [
            {
                "created_at": row.created_at,
                "speedup": row.speedup,
                "tokens_per_forward_pass": row.tokens_per_forward_pass,
                "seconds_saved": dashboard.seconds_saved(row),
            }
            for row in points
        ]


def _matching(search: str, review: str | None) -> Select:
    """Entries whose question or answer contains `search` (plain text, any case), in one review state or any."""
    matches = select(Entry).options(defer(Entry.embedding))
    if review is not None:
        check_review(review)
        matches = matches.where(Entry.review == review)
    if search:
        contains = (Entry.question.icontains(search, autoescape=True), Entry.answer.icontains(search, autoescape=True))
        matches = matches.where(or_(*contains))
    return matches
