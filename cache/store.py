"""AnswerCache: the one storage facade; each group of its methods lives in its own module of cache/.

The database is the source of truth: past answers, served replies and articles are rows; question vectors
are also in this replica's FAISS index (cache/index_sync.py), which follows the rows after a crash.
Several replicas may share one database: every lookup and article search first replays the changes any
replica committed since its last look (cache/changes.py), so it sees every answer, edit and delete committed
before it began; a deleted entry is never served even before that, because lookups read the rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from cache import changes, deployment
from cache.answer_vectors import AnswerVectors
from cache.article_vectors import ArticleVectors
from cache.articles import Articles
from cache.backend import Backend
from cache.browse import SORTS, Browse
from cache.editing import Editing
from cache.embedder_change import check_embedder
from cache.entries import Entries
from cache.index_sync import INDEX_FILE, SEEN_FILE, WORDINGS_FILE, IndexSync
from cache.lexical import LexicalIndex
from cache.records import (
    ArticleHit,
    ArticleRecord,
    CachedAnswer,
    DashboardStats,
    EntryPage,
    Hit,
    MergeResult,
    NewAnswer,
    NewReply,
    ReplyRecord,
    Suggestion,
    WordingRecord,
)
from cache.replies import Replies
from cache.schema import DB_FILE, create_db_engine, create_schema, startup_lock
from cache.text import normalize_question
from cache.transfer import Transfer
from cache.vectors import Embed, Embedding
from cache.wordings import Wordings

__all__ = ["DB_FILE", "INDEX_FILE", "SEEN_FILE", "SORTS", "WORDINGS_FILE", "AnswerCache", "normalize_question"]


class AnswerCache:
    """The storage facade the chat service and admin pages use; safe to share between threads."""

    def __init__(self, engine: Engine, embed: Embed, dim: int, index_path: Path, max_entries: int) -> None:
        sessions = sessionmaker(engine, expire_on_commit=False)
        embedding = Embedding(embed, dim)
        self.dim = dim
        self.max_entries = max_entries
        self.embedder_name = ""  # the embedding model's name, set by `open` (thresholds are tuned per model)
        self._backend = Backend(
            engine=engine,
            sessions=sessions,
            lock=threading.RLock(),
            embedding=embedding,
            index=IndexSync(sessions, dim, index_path),
            articles=ArticleVectors(sessions, dim),
            lexical=LexicalIndex(sessions),
            answers=AnswerVectors(sessions, embedding),
            max_entries=max_entries,
        )
        self._entries = Entries(self._backend)
        self._replies = Replies(self._backend)
        self._articles = Articles(self._backend)
        self._editing = Editing(self._backend)
        self._browse = Browse(self._backend)
        self._transfer = Transfer(self._backend)
        self._wordings = Wordings(self._backend)

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
        cache.embedder_name = embedder_name
        backend = cache._backend
        with startup_lock(engine), backend.lock:  # replicas starting at once create and re-embed one at a time
            create_schema(engine)
            reembedded = check_embedder(backend, embedder_name)
        with backend.lock:
            backend.index.open(rebuild=reembedded)
            backend.articles.refresh()
        return cache

    def close(self) -> None:
        self._backend.engine.dispose()

    def __enter__(self) -> AnswerCache:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- answers for the chat service (cache/entries.py) ---

    def find_exact(self, question: str, context_key: str, model_id: str, prompt_hash: str) -> CachedAnswer | None:
        """The answer cached for this exact (normalized) question and prompt; counts a hit."""
        return self._entries.find_exact(question, context_key, model_id, prompt_hash)

    def lookup(
        self,
        question: str,
        k: int = 4,
        threshold: float = 0.5,
        model_id: str | None = None,
        exclude_ids: Iterable[int] = (),
        reviews: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Up to `k` past answers whose questions score >= `threshold`, best first; `reviews` keeps only
        entries in those review states (None: any state)."""
        return self._entries.lookup(question, k, threshold, model_id, exclude_ids, reviews)

    def match(
        self,
        question: str,
        k: int = 2,
        model_id: str | None = None,
        reviews: Sequence[str] = ("approved",),
        lexical_weight: float = 0.0,
        match_answers: bool = False,
    ) -> list[Hit]:
        """The `k` best entries in those review states by a hybrid score (best-wording cosine, or with
        `match_answers` the answer's cosine where higher, plus `lexical_weight` x squashed BM25; both only for
        approved entries), best first, whatever the score."""
        return self._entries.match(question, k, model_id, reviews, lexical_weight, match_answers)

    def warm_match(self, match_answers: bool, lexical: bool) -> None:
        """Embed the approved answers and build the BM25 index ahead of the first `match` that needs them
        (47 answers: about 1.5 s on two busy cores, once per replica; later changes embed only what changed)."""
        self._entries.warm(match_answers, lexical)

    def mark_used(self, ids: Iterable[int]) -> None:
        """Count that these entries were served as decoding references."""
        self._entries.mark_used(ids)

    def add_answer(self, new: NewAnswer) -> int:
        """Store an answer (updating the one with the same exact key) and return its id."""
        return self._entries.add(new)

    # --- wordings of an entry's question (cache/wordings.py) ---

    def wordings(self, entry_id: int) -> list[WordingRecord]:
        """The entry's other wordings, confirmed first."""
        return self._wordings.for_entry(entry_id)

    def add_wording(self, entry_id: int, question: str, created_by: str = "") -> WordingRecord | None:
        """Attach a confirmed wording (it matches at once, on every replica); None when the entry has it."""
        return self._wordings.add(entry_id, question, "confirmed", created_by)

    def suggest_wording(self, entry_id: int, question: str) -> WordingRecord | None:
        """Store a customer's question as a suggested wording, which matches nothing until confirmed;
        None when the entry already has it. KeyError when the entry is gone."""
        return self._wordings.add(entry_id, question, "suggested", "")

    def confirm_wordings(self, wording_ids: Iterable[int]) -> list[WordingRecord]:
        return self._wordings.set_confirmed(wording_ids)

    def remove_wordings(self, wording_ids: Iterable[int]) -> list[WordingRecord]:
        return self._wordings.remove(wording_ids)

    def suggested_wordings(self, limit: int = 200) -> list[Suggestion]:
        return self._wordings.suggestions(limit)

    def merge_entries(self, kept_id: int, merged_id: int, actor: str = "") -> MergeResult:
        """Merge one entry into another: its question becomes a confirmed wording of the kept one."""
        return self._wordings.merge(kept_id, merged_id, actor)

    # --- replies (cache/replies.py) ---

    def record_reply(self, new: NewReply) -> int:
        """Store a served turn; an `entry_id` whose entry was evicted meanwhile is stored as None."""
        return self._replies.record(new)

    def set_feedback(self, reply_id: int, value: int, reason: str = "") -> None:
        """Record a thumbs up (+1) or down (-1), or clear the rating (0); KeyError for an unknown reply."""
        self._replies.set_feedback(reply_id, value, reason)

    def set_verification(self, reply_id: int, identical: bool, measured_speedup: float) -> None:
        """Record whether a greedy re-run matched the reply, and the speedup measured against it."""
        self._replies.set_verification(reply_id, identical, measured_speedup)

    def get_reply(self, reply_id: int) -> ReplyRecord | None:
        return self._replies.get(reply_id)

    def replies_for_entry(self, entry_id: int) -> list[ReplyRecord]:
        """Replies served from or stored as this entry, newest first."""
        return self._replies.for_entry(entry_id)

    def recent_replies(self, limit: int = 50, offset: int = 0, outcomes: tuple[str, ...] = ()) -> list[ReplyRecord]:
        """The newest served replies; with `outcomes` (records.OUTCOMES), only those."""
        return self._replies.recent(limit, offset, outcomes)

    # --- articles (cache/articles.py) ---

    def upsert_article(self, article_id: str, title: str, body: str) -> ArticleRecord:
        """Create or replace an article, embedding its title and body."""
        return self._articles.upsert(article_id, title, body)

    def delete_article(self, article_id: str) -> bool:
        return self._articles.delete(article_id)

    def get_article(self, article_id: str) -> ArticleRecord | None:
        return self._articles.get(article_id)

    def list_articles(self) -> list[ArticleRecord]:
        return self._articles.list_all()

    def change_number(self) -> int:
        """The number of the newest change to entries or articles any replica committed: equal numbers, equal
        help centre (one small read)."""
        with self._backend.sessions() as session:
            return changes.latest(session)

    def similarities(self, question: str, texts: Sequence[str]) -> list[float]:
        """The cosine of `question` to each of `texts` (sentences of an article, say), the texts' vectors kept."""
        return self._backend.embedding.similarities(question, texts)

    def best_article(self, question: str, threshold: float = 0.3) -> ArticleHit | None:
        """The article closest in meaning to `question`, if it scores >= `threshold`."""
        return self._articles.best(question, threshold)

    # --- staff pages (cache/browse.py, cache/editing.py) ---

    def get_entry(self, entry_id: int) -> CachedAnswer | None:
        return self._browse.get_entry(entry_id)

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
        only those in one review state; `sort` is one of SORTS."""
        return self._browse.list_entries(search, sort, descending, limit, offset, review)

    def update_entry(
        self,
        entry_id: int,
        question: str | None = None,
        answer: str | None = None,
        answer_ids: list[int] | None = None,
        review: str | None = None,
    ) -> CachedAnswer:
        """Edit an entry; a new question is re-embedded. Raises KeyError for an unknown id."""
        return self._editing.update_entry(entry_id, question, answer, answer_ids, review)

    def seed_if_new(self, seed: Callable[[], None]) -> bool:
        """Run `seed` on a fresh database only (no article yet), one process at a time: replicas that start
        together on an empty database seed it once. True when this call seeded."""
        with startup_lock(self._backend.engine):
            if self.list_articles():
                return False
            seed()
            return True

    def set_review(self, entry_ids: Iterable[int], review: str) -> list[int]:
        """Put entries into a review state (approve or reject, one or in bulk); returns the ids that exist."""
        return self._editing.set_review(entry_ids, review)

    def delete_entry(self, entry_id: int) -> bool:
        """Delete the row first, then its vector; replies keep their text with entry_id set to None."""
        return self._editing.delete_entry(entry_id)

    def dashboard_stats(self) -> DashboardStats:
        return self._browse.dashboard_stats()

    def reply_series(self) -> list[dict]:
        """One point per reply, oldest first: created_at, speedup and tokens_per_forward_pass (or None),
        and seconds_saved against plain greedy decoding (0 when unknown)."""
        return self._browse.reply_series()

    # --- JSON Lines transfer (cache/transfer.py) ---

    def export_jsonl(self, path: str | Path) -> int:
        """Write every entry and article as one JSON object per line; returns the number of lines."""
        return self._transfer.export_jsonl(path)

    def import_jsonl(self, path: str | Path, approve: bool = False) -> int:
        """Add (or update) the records of an export in one transaction; a bad line imports nothing.
        `approve` marks every imported answer approved, whatever review state the file gives it."""
        return self._transfer.import_jsonl(path, approve)

    # --- deployment-wide settings (cache/deployment.py) ---

    def deployment_setting(self, name: str) -> str | None:
        """The value every replica sharing this database agreed on for `name`, or None if none was claimed."""
        return deployment.read(self._backend.sessions, name)

    def claim_deployment_setting(self, name: str, value: str) -> str:
        """Store `value` under `name` unless a replica already did (first writer wins); returns the stored one."""
        return deployment.claim(self._backend.sessions, name, value)
