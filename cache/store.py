"""AnswerCache: past answers, served replies and articles in SQL, question vectors in a FAISS index.

The database is the source of truth. Writes commit the row (with its embedding) first and then update
and atomically save the index; `open` rebuilds the index whenever its ids disagree with the database,
and lookups drop index ids without a row, so a crash between the two writes loses nothing.

Several processes (replicas) may share one database, each with its own index in its own data folder.
Every entry or article write also logs a numbered change (cache/changes.py), and every lookup and article
search first replays the changes committed since its last look. So a lookup sees every answer, edit and
delete that any replica committed before the lookup began; a deleted entry is never served even before
that, because lookups read the rows.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy import Engine, delete, func, or_, select, update
from sqlalchemy.orm import Session, defer, sessionmaker

from cache import changes, dashboard, jsonl, rows
from cache.records import (
    REVIEW_STATES,
    ArticleHit,
    ArticleRecord,
    CachedAnswer,
    DashboardStats,
    EntryPage,
    Hit,
    NewAnswer,
    NewReply,
    ReplyRecord,
)
from cache.schema import Article, Entry, Reply, Setting, create_db_engine, create_schema, startup_lock, utc_now
from cache.text import normalize_question
from cache.vector_index import VectorIndex

__all__ = ["AnswerCache", "normalize_question"]

DB_FILE = "cache.sqlite3"
INDEX_FILE = "questions.faiss"
SEEN_FILE = "questions.faiss.seq"  # the newest change number the saved index holds
MAX_REPLAYED_IDS = 1000  # more changed entries than this at once: rebuild rather than a huge IN (...)
SORT_COLUMNS = {"hits": Entry.hits, "uses": Entry.uses, "date": Entry.created_at, "speedup": Entry.speedup}
SORTS = tuple(SORT_COLUMNS)

Embed = Callable[[list[str]], np.ndarray]


class AnswerCache:
    """The one storage facade the chat service and admin pages use; safe to share between threads."""

    def __init__(self, engine: Engine, embed: Embed, dim: int, index_path: Path, max_entries: int) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._embed_texts = embed
        self.dim = dim
        self.max_entries = max_entries
        self._index_path = index_path
        self._index = VectorIndex(dim)
        self._seen_seq = 0  # the newest change number replayed into self._index
        self._last_question: tuple[str, np.ndarray] | None = None  # memo of _embed_question
        self._lock = threading.RLock()  # guards index mutations and every write path
        self._articles: tuple[list[str], np.ndarray] = ([], np.zeros((0, dim), dtype=np.float32))

    @classmethod
    def open(
        cls,
        data_dir: str | Path,
        embed: Embed,
        dim: int,
        url: str | None = None,
        max_entries: int = 10000,
        embedder_name: str = "",
    ) -> AnswerCache:
        """Open (or create) the cache in `data_dir`; `url` may name any SQLAlchemy database instead."""
        if dim < 1 or max_entries < 1:
            raise ValueError(f"dim and max_entries must be >= 1, got {dim} and {max_entries}")
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_db_engine(url or f"sqlite:///{data_dir / DB_FILE}")
        cache = cls(engine, embed, dim, data_dir / INDEX_FILE, max_entries)
        with startup_lock(engine), cache._lock:  # replicas starting at once create and re-embed one at a time
            create_schema(engine)
            reembedded = cache._check_embedder(embedder_name)
        with cache._lock:
            cache._sync_index(rebuild=reembedded)
            cache._refresh_articles()
        return cache

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> AnswerCache:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- answers for the chat service ---

    def find_exact(self, question: str, context_key: str, model_id: str, prompt_hash: str) -> CachedAnswer | None:
        """The answer cached for this exact (normalized) question and prompt; counts a hit."""
        with self._lock, self._sessions.begin() as session:
            entry = _find_entry(session, normalize_question(question), context_key, model_id, prompt_hash)
            if entry is None:
                return None
            entry.hits += 1
            entry.last_used_at = utc_now()
            found = rows.cached_answer(entry)
        return found

    def lookup(
        self,
        question: str,
        k: int = 4,
        threshold: float = 0.5,
        model_id: str | None = None,
        exclude_ids: Iterable[int] = (),
        reviews: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Up to `k` past answers whose questions score >= `threshold` against `question`, best first.

        `reviews` keeps only entries in those review states (None: any state).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        _check_threshold(threshold)
        query = self._embed_question(question)  # (dim,)
        self._catch_up()
        excluded = set(exclude_ids)
        want = k + len(excluded)
        while True:
            with self._lock:
                candidates = self._index.search(query, want)
                indexed = len(self._index)
            ids = [c.id for c in candidates if c.score >= threshold and c.id not in excluded]
            hits = self._hits_for(ids, query, threshold, model_id, reviews)
            exhausted = want >= indexed or not candidates or candidates[-1].score < threshold
            if len(hits) >= k or exhausted:
                return hits[:k]
            want *= 2  # some candidates were filtered out: look further down the ranking

    def mark_used(self, ids: Iterable[int]) -> None:
        """Count that these entries were served as decoding references."""
        ids = sorted(set(ids))
        if not ids:
            return
        with self._lock, self._sessions.begin() as session:
            session.execute(
                update(Entry)
                .where(Entry.id.in_(ids))
                .values(uses=Entry.uses + 1, last_used_at=utc_now())
                .execution_options(synchronize_session=False)
            )

    def add_answer(self, new: NewAnswer) -> int:
        """Store an answer (updating the one with the same exact key) and return its id."""
        vector = self._embed_question(new.question)[np.newaxis]  # (1, dim)
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                entry_id = _upsert_entry(session, new, vector[0], utc_now()).id
                changes.record(session, seq, entry_ids=[entry_id])
            self._index.add([entry_id], vector)
            self._evict_over_limit()
            self._save_index()
        return entry_id

    # --- replies ---

    def record_reply(self, new: NewReply) -> int:
        """Store a served turn; an `entry_id` whose entry was evicted meanwhile is stored as None."""
        with self._lock, self._sessions.begin() as session:
            entry_id = new.entry_id
            # FOR KEY SHARE on PostgreSQL: a replica deleting the entry now waits until this reply is stored.
            key_share = {"read": True, "key_share": True}
            if entry_id is not None and session.get(Entry, entry_id, with_for_update=key_share) is None:
                entry_id = None
            reply = Reply(
                entry_id=entry_id,
                question=new.question,
                answer=new.answer,
                history=list(new.history),
                stats=dict(new.stats),
                speedup=new.speedup,
                seconds=new.seconds,
                greedy_seconds=new.greedy_seconds,
                prompt_ids=[int(i) for i in new.prompt_ids] if new.prompt_ids is not None else None,
                token_ids=[int(i) for i in new.token_ids] if new.token_ids is not None else None,
                reference_entry_ids=[int(i) for i in new.reference_entry_ids],
                exact_hit=new.exact_hit,
                feedback=None,
                feedback_reason="",
                session_id=new.session_id,
                created_at=utc_now(),
            )
            session.add(reply)
            session.flush()
            return reply.id

    def set_feedback(self, reply_id: int, value: int, reason: str = "") -> None:
        """Record a thumbs up (+1) or down (-1), or clear the rating (0); raises KeyError for an unknown reply."""
        if isinstance(value, bool) or value not in (-1, 0, 1):
            raise ValueError(f"feedback must be -1, 0 or 1, got {value!r}")
        with self._lock, self._sessions.begin() as session:
            reply = _get_or_raise(session, Reply, reply_id)
            reply.feedback = value or None
            reply.feedback_reason = reason if value else ""

    def set_verification(self, reply_id: int, identical: bool, measured_speedup: float) -> None:
        """Record whether a greedy re-run matched the reply, and the speedup measured against it."""
        if not math.isfinite(measured_speedup) or measured_speedup <= 0:
            raise ValueError(f"measured_speedup must be a positive number, got {measured_speedup!r}")
        with self._lock, self._sessions.begin() as session:
            reply = _get_or_raise(session, Reply, reply_id)
            reply.verified = bool(identical)
            reply.measured_speedup = float(measured_speedup)

    def get_reply(self, reply_id: int) -> ReplyRecord | None:
        with self._sessions() as session:
            reply = session.get(Reply, reply_id)
            return rows.reply_record(reply) if reply is not None else None

    def replies_for_entry(self, entry_id: int) -> list[ReplyRecord]:
        """Replies served from or stored as this entry, newest first."""
        return self._replies(select(Reply).where(Reply.entry_id == entry_id))

    def recent_replies(self, limit: int = 50, offset: int = 0) -> list[ReplyRecord]:
        _check_page(limit, offset)
        return self._replies(select(Reply), limit, offset)

    # --- articles ---

    def upsert_article(self, article_id: str, title: str, body: str) -> ArticleRecord:
        """Create or replace an article, embedding its title and body."""
        if not article_id.strip():
            raise ValueError("article id must not be empty")
        vector = self._embed([_article_text(title, body)])[0]
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                record = rows.article_record(_upsert_article(session, article_id, title, body, vector, utc_now()))
                changes.record(session, seq, article_ids=[article_id])
            self._refresh_articles()
        return record

    def delete_article(self, article_id: str) -> bool:
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                deleted = session.execute(delete(Article).where(Article.id == article_id)).rowcount > 0
                changes.record(session, seq, article_ids=[article_id] if deleted else [])
            self._refresh_articles()
        return deleted

    def get_article(self, article_id: str) -> ArticleRecord | None:
        with self._sessions() as session:
            article = session.get(Article, article_id)
            return rows.article_record(article) if article is not None else None

    def list_articles(self) -> list[ArticleRecord]:
        with self._sessions() as session:
            articles = session.scalars(select(Article).options(defer(Article.embedding)).order_by(Article.id))
            return [rows.article_record(article) for article in articles]

    def best_article(self, question: str, threshold: float = 0.3) -> ArticleHit | None:
        """The article closest in meaning to `question`, if it scores >= `threshold`."""
        _check_threshold(threshold)
        self._catch_up()
        article_ids, vectors = self._articles  # one snapshot: (n,) ids and (n, dim) vectors
        if not article_ids:
            return None
        scores = vectors @ self._embed_question(question)  # (n,)
        best = int(np.argmax(scores))
        score = float(np.clip(scores[best], -1.0, 1.0))
        if score < threshold:
            return None
        article = self.get_article(article_ids[best])
        return ArticleHit(article.id, article.title, article.body, score) if article is not None else None

    # --- admin ---

    def get_entry(self, entry_id: int) -> CachedAnswer | None:
        with self._sessions() as session:
            entry = session.get(Entry, entry_id)
            return rows.cached_answer(entry) if entry is not None else None

    def list_entries(
        self,
        search: str = "",
        sort: str = "date",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        review: str | None = None,
    ) -> EntryPage:
        """One page of entries whose question or answer contains `search` (plain text, any case), optionally
        only those in one review state."""
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {SORTS}, got {sort!r}")
        _check_page(limit, offset)
        matches = select(Entry).options(defer(Entry.embedding))
        if review is not None:
            _check_review(review)
            matches = matches.where(Entry.review == review)
        if search:
            matches = matches.where(
                or_(Entry.question.icontains(search, autoescape=True), Entry.answer.icontains(search, autoescape=True))
            )
        with self._sessions() as session:
            total = session.scalar(select(func.count()).select_from(matches.subquery()))
            column = SORT_COLUMNS[sort]
            order = (column.desc(), Entry.id.desc()) if descending else (column.asc(), Entry.id.asc())
            # Entries with no speedup (imported, seeded) come last either way, on every database.
            entries = session.scalars(
                matches.order_by(column.is_(None), *order).limit(limit).offset(offset)
            ).all()
            return EntryPage([rows.cached_answer(entry) for entry in entries], total)

    def update_entry(
        self,
        entry_id: int,
        question: str | None = None,
        answer: str | None = None,
        answer_ids: list[int] | None = None,
        review: str | None = None,
    ) -> CachedAnswer:
        """Edit an entry; a new question is re-embedded. Raises KeyError for an unknown id."""
        if review is not None:
            _check_review(review)
        if answer is not None and answer_ids is None:
            raise ValueError("a new answer needs its answer_ids too: the cache cannot tokenize")
        vector = self._embed([question]) if question is not None else None  # (1, dim)
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                entry = _get_or_raise(session, Entry, entry_id)
                if vector is not None:
                    entry.question = question
                    entry.normalized_question = normalize_question(question)
                    entry.embedding = vector[0].tobytes()
                if answer is not None:
                    entry.answer = answer
                if answer_ids is not None:
                    entry.answer_ids = [int(i) for i in answer_ids]
                if review is not None:
                    entry.review = review
                entry.updated_at = utc_now()
                updated = rows.cached_answer(entry)
                changes.record(session, seq, entry_ids=[entry_id])
            if vector is not None:
                self._index.add([entry_id], vector)
                self._save_index()
        return updated

    def seed_if_new(self, seed: Callable[[], None]) -> bool:
        """Run `seed` on a fresh database only (no article yet), one process at a time: replicas that start
        together on an empty database seed it once. True when this call seeded."""
        with startup_lock(self._engine):
            if self.list_articles():
                return False
            seed()
            return True

    def set_review(self, entry_ids: Iterable[int], review: str) -> list[int]:
        """Put entries into a review state (approve or reject, one or in bulk); returns the ids that exist.

        Lookups read the state from the rows, so every replica sees it at once: no index change is needed.
        """
        _check_review(review)
        ids = sorted({int(i) for i in entry_ids})
        if not ids:
            return []
        with self._lock, self._sessions.begin() as session:
            found = list(session.scalars(select(Entry.id).where(Entry.id.in_(ids)).order_by(Entry.id)))
            session.execute(
                update(Entry).where(Entry.id.in_(found)).values(review=review, updated_at=utc_now())
                .execution_options(synchronize_session=False)
            )
        return found

    def delete_entry(self, entry_id: int) -> bool:
        """Delete the row first, then its vector; replies keep their text with entry_id set to None."""
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                deleted = session.execute(delete(Entry).where(Entry.id == entry_id)).rowcount > 0
                changes.record(session, seq, entry_ids=[entry_id] if deleted else [])
            if deleted:
                self._index.remove([entry_id])
                self._save_index()
        return deleted

    def export_jsonl(self, path: str | Path) -> int:
        """Write every entry and article as one JSON object per line; returns the number of lines."""
        with self._sessions() as session:
            entries = session.scalars(select(Entry).options(defer(Entry.embedding)).order_by(Entry.id))
            lines = [jsonl.entry_line(rows.cached_answer(entry)) for entry in entries]
        lines += [jsonl.article_line(article) for article in self.list_articles()]
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        Path(path).write_text(text, encoding="utf-8")
        return len(lines)

    def import_jsonl(self, path: str | Path, approve: bool = False) -> int:
        """Add (or update) the records of an export in one transaction; a bad line imports nothing.

        `approve` marks every imported answer approved, whatever review state the file gives it.
        """
        entries, articles = jsonl.parse_lines(Path(path).read_text(encoding="utf-8").splitlines())
        if approve:
            entries = [replace(item, answer=replace(item.answer, review="approved")) for item in entries]
        entry_vectors = self._embed([item.answer.question for item in entries])  # (n, dim)
        article_vectors = self._embed([_article_text(item.title, item.body) for item in articles])
        with self._lock:
            with self._sessions.begin() as session:
                seq = changes.begin(session)
                vector_by_id = {}  # one vector per id: the file may repeat an exact key
                for item, vector in zip(entries, entry_vectors, strict=True):
                    vector_by_id[_import_entry(session, item, vector).id] = vector
                for item, vector in zip(articles, article_vectors, strict=True):
                    _upsert_article(session, item.id, item.title, item.body, vector, utc_now())
                changes.record(session, seq, entry_ids=vector_by_id, article_ids=[item.id for item in articles])
            if vector_by_id:
                self._index.add(list(vector_by_id), np.stack(list(vector_by_id.values())))
            self._evict_over_limit()
            self._save_index()
            self._refresh_articles()
        return len(entries) + len(articles)

    def dashboard_stats(self) -> DashboardStats:
        with self._sessions() as session:
            entries = session.scalar(select(func.count(Entry.id)))
            articles = session.scalar(select(func.count(Article.id)))
            replies = session.execute(
                select(
                    Reply.question, Reply.speedup, Reply.seconds, Reply.greedy_seconds, Reply.reference_entry_ids,
                    Reply.exact_hit, Reply.feedback,
                )
            ).all()
        return dashboard.summarize(replies, entries, articles)

    def reply_series(self) -> list[dict]:
        """One point per reply, oldest first: created_at, speedup and tokens_per_forward_pass (or None),
        and seconds_saved against plain greedy decoding (0 when unknown)."""
        with self._sessions() as session:
            points = session.execute(
                select(Reply.created_at, Reply.speedup, Reply.seconds, Reply.greedy_seconds, Reply.stats)
                .order_by(Reply.created_at, Reply.id)
            )
            return [
                {
                    "created_at": row.created_at,
                    "speedup": row.speedup,
                    "tokens_per_forward_pass": dashboard.number_stat(row.stats, "tokens_per_forward_pass"),
                    "seconds_saved": dashboard.seconds_saved(row),
                }
                for row in points
            ]

    # --- internals ---

    def _embed_question(self, question: str) -> np.ndarray:
        """(dim,) vector of a question; the last one is kept, since a chat turn asks about the same question
        three times (article, grounding, references) and stores it once: embedding is the costly part."""
        last = self._last_question  # one read: another thread may replace it meanwhile
        if last is not None and last[0] == question:
            return last[1]
        vector = self._embed([question])[0]
        self._last_question = (question, vector)
        return vector

    def _embed(self, texts: list[str]) -> np.ndarray:
        """(n, dim) unit float32 vectors, checked, so index scores stay cosine similarities."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._embed_texts(list(texts)), dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"embed returned shape {vectors.shape}, expected {(len(texts), self.dim)}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # (n, 1)
        return vectors / np.maximum(norms, 1e-12)

    def _hits_for(
        self, ids: list[int], query: np.ndarray, threshold: float, model_id: str | None, reviews: Sequence[str] | None
    ) -> list[Hit]:
        """Rows for index candidates, scored from the stored embedding; ids without a row drop out."""
        if not ids:
            return []
        statement = select(Entry).where(Entry.id.in_(ids))
        if model_id is not None:
            statement = statement.where(Entry.model_id == model_id)
        if reviews is not None:
            statement = statement.where(Entry.review.in_(list(reviews)))
        with self._sessions() as session:
            entries = session.scalars(statement).all()
        hits = [
            Hit(e.id, e.question, e.answer, list(e.answer_ids), _cosine(query, e.embedding), e.review) for e in entries
        ]
        return sorted((hit for hit in hits if hit.score >= threshold), key=lambda hit: (-hit.score, hit.id))

    def _replies(self, statement, limit: int | None = None, offset: int = 0) -> list[ReplyRecord]:
        statement = statement.order_by(Reply.created_at.desc(), Reply.id.desc()).offset(offset).limit(limit)
        with self._sessions() as session:
            return [rows.reply_record(reply) for reply in session.scalars(statement)]

    def _evict_over_limit(self) -> None:
        """Over max_entries, delete the least useful entries: fewest hits + uses, then least recently used."""
        with self._sessions.begin() as session:
            if session.scalar(select(func.count(Entry.id))) <= self.max_entries:
                return
            seq = changes.begin(session)  # waits for other writers; one of them may have evicted meanwhile
            excess = session.scalar(select(func.count(Entry.id))) - self.max_entries
            if excess <= 0:
                return
            usefulness = (Entry.hits + Entry.uses, Entry.last_used_at, Entry.id)
            victims = session.scalars(select(Entry.id).order_by(*usefulness).limit(excess)).all()
            session.execute(delete(Entry).where(Entry.id.in_(victims)))
            changes.record(session, seq, entry_ids=victims)
        self._index.remove(victims)

    def _save_index(self) -> None:
        """The index first, then the change number it holds: a crash between the two only replays more."""
        self._index.save(self._index_path)
        _write_atomically(self._index_path.with_name(SEEN_FILE), str(self._seen_seq))

    def _check_embedder(self, embedder_name: str) -> bool:
        """If the stored vectors came from another embedder (dim or name), re-embed everything first."""
        wanted = {"embedding_dim": str(self.dim)}
        if embedder_name:
            wanted["embedder_name"] = embedder_name
        with self._sessions() as session:
            stored = {setting.key: setting.value for setting in session.scalars(select(Setting))}
        changed = any(key in stored and stored[key] != value for key, value in wanted.items())
        if changed:
            self._reembed_all()
        with self._sessions.begin() as session:  # only after re-embedding, so a crash re-embeds again
            for key, value in wanted.items():
                session.merge(Setting(key=key, value=value))
        return changed

    def _reembed_all(self) -> None:
        with self._sessions.begin() as session:
            seq = changes.begin(session)
            entries = session.scalars(select(Entry)).all()
            for entry, vector in zip(entries, self._embed([e.question for e in entries]), strict=True):
                entry.embedding = vector.tobytes()
            articles = session.scalars(select(Article)).all()
            texts = [_article_text(a.title, a.body) for a in articles]
            for article, vector in zip(articles, self._embed(texts), strict=True):
                article.embedding = vector.tobytes()
            changes.record(session, seq, [e.id for e in entries], [a.id for a in articles])

    def _sync_index(self, rebuild: bool) -> None:
        """Use the saved index if it holds exactly the database's ids (then replay the changes it has not
        seen), else rebuild it from the rows."""
        index = VectorIndex.load(self._index_path, self.dim)
        seen = _read_seq(self._index_path.with_name(SEEN_FILE))
        with self._sessions() as session:
            entry_ids = set(session.scalars(select(Entry.id)))
            latest = changes.latest(session)
        # A number beyond the database's own means the file belongs to another database: rebuild then too.
        in_step = seen is not None and seen <= latest and index.ids() == entry_ids
        if not rebuild and self._index_path.exists() and in_step:
            self._index, self._seen_seq = index, seen
            self._catch_up()
            return
        self._rebuild_index()

    def _rebuild_index(self) -> None:
        with self._sessions() as session:
            seq = changes.latest(session)  # read before the rows: later changes are replayed, harmlessly
        self._index, self._seen_seq = self._stored_vectors_index(), seq
        self._save_index()

    def _catch_up(self) -> None:
        """Replay into the index and article vectors every change committed since the last look, by any
        replica: one indexed query when nothing changed."""
        with self._lock:
            with self._sessions() as session:
                feed = changes.read_since(session, self._seen_seq)
                replay = feed.complete and len(feed.entry_ids) <= MAX_REPLAYED_IDS
                ids = feed.entry_ids if replay else set()
                stored = _embeddings(session, ids)
            if not replay:
                self._rebuild_index()
                self._refresh_articles()
                return
            self._index.remove(ids - {row.id for row in stored})  # deleted meanwhile
            if stored:
                self._index.add([row.id for row in stored], np.stack([_vector(row.embedding) for row in stored]))
            if feed.articles_changed:
                self._refresh_articles()
            self._seen_seq = feed.seq

    def _stored_vectors_index(self) -> VectorIndex:
        index = VectorIndex(self.dim)
        with self._sessions() as session:
            stored = session.execute(select(Entry.id, Entry.embedding)).all()
        if stored:
            index.add([row.id for row in stored], np.stack([_vector(row.embedding) for row in stored]))
        return index

    def _refresh_articles(self) -> None:
        with self._sessions() as session:
            stored = session.execute(select(Article.id, Article.embedding).order_by(Article.id)).all()
        vectors = np.stack([_vector(row.embedding) for row in stored]) if stored else np.zeros((0, self.dim))
        self._articles = ([row.id for row in stored], vectors.astype(np.float32))


def _find_entry(
    session: Session, normalized_question: str, context_key: str, model_id: str, prompt_hash: str
) -> Entry | None:
    statement = (
        select(Entry)
        .where(
            Entry.normalized_question == normalized_question,
            Entry.context_key == context_key,
            Entry.model_id == model_id,
            Entry.prompt_hash == prompt_hash,
        )
        .order_by(Entry.updated_at.desc(), Entry.id.desc())
    )
    return session.scalars(statement).first()


def _upsert_entry(session: Session, new: NewAnswer, vector: np.ndarray, now: datetime) -> Entry:
    """The entry with the same exact key, updated, or a new one; flushed so it has an id."""
    normalized = normalize_question(new.question)
    entry = _find_entry(session, normalized, new.context_key, new.model_id, new.prompt_hash)
    # An approved answer is never overwritten by other text: staff approved those words, not the new ones.
    if entry is None or (entry.review == "approved" and entry.answer != new.answer):
        entry = Entry(created_at=now, hits=0, uses=0)
        session.add(entry)
    if entry.answer != new.answer or entry.review is None:
        entry.review = new.review  # a review was of the old text; the same text keeps its review
    entry.question = new.question
    entry.normalized_question = normalized
    entry.context = new.context
    entry.context_key = new.context_key
    entry.answer = new.answer
    entry.answer_ids = [int(i) for i in new.answer_ids]
    entry.model_id = new.model_id
    entry.prompt_hash = new.prompt_hash
    entry.article_ids = [str(i) for i in new.article_ids]
    entry.stats = dict(new.stats)
    entry.speedup = new.speedup
    entry.embedding = vector.astype(np.float32).tobytes()
    entry.updated_at = entry.last_used_at = now
    session.flush()
    return entry


def _import_entry(session: Session, item: jsonl.ImportedEntry, vector: np.ndarray) -> Entry:
    now = utc_now()
    entry = _upsert_entry(session, item.answer, vector, now)
    entry.review = item.answer.review  # the file's word on the review counts, even for unchanged text
    entry.hits, entry.uses = item.hits, item.uses
    entry.created_at = item.created_at or entry.created_at
    entry.last_used_at = item.last_used_at or now
    return entry


def _upsert_article(
    session: Session, article_id: str, title: str, body: str, vector: np.ndarray, now: datetime
) -> Article:
    article = session.get(Article, article_id)
    if article is None:
        article = Article(id=article_id, created_at=now)
        session.add(article)
    article.title, article.body = title, body
    article.embedding = vector.astype(np.float32).tobytes()
    article.updated_at = now
    return article


def _get_or_raise(session: Session, model: type, key):
    row = session.get(model, key)
    if row is None:
        raise KeyError(f"no {model.__name__.lower()} with id {key!r}")
    return row


def _check_review(review: str) -> None:
    if review not in REVIEW_STATES:
        raise ValueError(f"review must be one of {', '.join(REVIEW_STATES)}, not {review!r}")


def _article_text(title: str, body: str) -> str:
    return f"{title}\n\n{body}"


def _vector(embedding: bytes) -> np.ndarray:
    return np.frombuffer(embedding, dtype=np.float32)


def _cosine(query: np.ndarray, embedding: bytes) -> float:
    return float(np.clip(np.dot(query, _vector(embedding)), -1.0, 1.0))


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


def _check_threshold(threshold: float) -> None:
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be within [-1, 1] (cosine similarity), got {threshold}")


def _check_page(limit: int, offset: int) -> None:
    if limit < 1 or offset < 0:
        raise ValueError(f"need limit >= 1 and offset >= 0, got limit={limit}, offset={offset}")
