"""Cached answers for the chat service: exact and similar lookup, storing an answer, and eviction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from cache import changes, lexical, rows
from cache.backend import Backend
from cache.checks import check_threshold
from cache.records import CachedAnswer, Hit, NewAnswer
from cache.schema import Entry, Wording, utc_now
from cache.text import normalize_question
from cache.vectors import cosine, to_bytes

MATCH_POOL = 4  # dense candidates a hybrid match rescores besides the lexical ones (more would read many rows)


class Entries:
    """Reads see every write any replica committed before them; writes go to the row first, then the index."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def find_exact(self, question: str, context_key: str, model_id: str, prompt_hash: str) -> CachedAnswer | None:
        """The answer cached for this exact (normalized) question and prompt; counts a hit."""
        with self._backend.lock, self._backend.sessions.begin() as session:
            entry = find_row(session, normalize_question(question), context_key, model_id, prompt_hash)
            if entry is None:
                return None
            entry.hits += 1
            entry.last_used_at = utc_now()
            return rows.cached_answer(entry)

    def lookup(
        self, question: str, k: int, threshold: float, model_id: str | None, exclude_ids: Iterable[int],
        reviews: Sequence[str] | None,
    ) -> list[Hit]:
        """Up to `k` entries whose questions score >= `threshold`, best first, read from their rows."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        check_threshold(threshold)
        query = self._backend.embedding.question(question)  # (dim,)
        self._backend.catch_up()
        excluded = set(exclude_ids)
        want = k + len(excluded)
        while True:
            with self._backend.lock:
                candidates = self._backend.index.search(query, want)
                indexed = len(self._backend.index)
            ids = [c.id for c in candidates if c.score >= threshold and c.id not in excluded]
            hits = self._hits_for(ids, query, threshold, model_id, reviews)
            exhausted = want >= indexed or not candidates or candidates[-1].score < threshold
            if len(hits) >= k or exhausted:
                return hits[:k]
            want *= 2  # some candidates were filtered out: look further down the ranking

    def match(
        self, question: str, k: int, model_id: str | None, reviews: Sequence[str], lexical_weight: float,
        match_answers: bool,
    ) -> list[Hit]:
        """The `k` best entries by a fused score: best-wording cosine (or the answer's, where higher, with
        `match_answers`) + lexical_weight x squashed BM25, best first, with no threshold (the caller compares
        the best with its runner-up). Only approved entries have answer vectors and a lexical part."""
        query = self._backend.embedding.question(question)  # (dim,)
        pool = self.lookup(question, max(k, MATCH_POOL), -1.0, model_id, (), reviews)
        seq = self._backend.index.seen_seq  # lookup caught up first
        # With a weight of 0 no BM25 index is built at all, and without match_answers no answer is embedded.
        lexical_scores = self._backend.lexical.scores(question, seq) if lexical_weight else {}
        answer_scores = self._backend.answers.scores(query, seq) if match_answers else {}
        near_answers = sorted(answer_scores, key=lambda i: -answer_scores[i])[:MATCH_POOL]
        have = {hit.id for hit in pool}
        missing = list(dict.fromkeys(i for i in [*lexical_scores, *near_answers] if i not in have))
        pool += self._hits_for(missing, query, -1.0, model_id, reviews)
        fused = [_fuse(hit, answer_scores.get(hit.id), lexical_scores.get(hit.id, 0.0), lexical_weight)
                 for hit in pool]
        return sorted(fused, key=lambda hit: (-hit.score, hit.id))[:k]

    def warm(self, match_answers: bool, lexical: bool) -> None:
        """Build the answer vectors and the BM25 index now, so the first customer does not wait for them."""
        self._backend.catch_up()
        seq = self._backend.index.seen_seq
        if match_answers:
            self._backend.answers.scores(np.zeros(self._backend.embedding.dim, dtype=np.float32), seq)
        if lexical:
            self._backend.lexical.scores("", seq)

    def mark_used(self, ids: Iterable[int]) -> None:
        """Count that these entries were served as decoding references."""
        ids = sorted(set(ids))
        if not ids:
            return
        with self._backend.lock, self._backend.sessions.begin() as session:
            session.execute(
                update(Entry)
                .where(Entry.id.in_(ids))
                .values(uses=Entry.uses + 1, last_used_at=utc_now())
                .execution_options(synchronize_session=False)
            )

    def add(self, new: NewAnswer) -> int:
        """Store an answer (updating the one with the same exact key) and return its id."""
        vector = self._backend.embedding.question(new.question)[np.newaxis]  # (1, dim)
        with self._backend.lock:
            with self._backend.sessions.begin() as session:
                seq = changes.begin(session)
                entry_id = upsert_row(session, new, vector[0]).id
                changes.record(session, seq, entry_ids=[entry_id])
            self._backend.index.add([entry_id], vector)
            evict_over_limit(self._backend)
            self._backend.index.save()
        return entry_id

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
        with self._backend.sessions() as session:
            entries = session.scalars(statement).all()
            wordings = confirmed_wordings(session, [e.id for e in entries])
        hits = [_best_wording_hit(e, wordings.get(e.id, []), query) for e in entries]
        return sorted((hit for hit in hits if hit.score >= threshold), key=lambda hit: (-hit.score, hit.id))


def confirmed_wordings(session: Session, entry_ids: list[int]) -> dict[int, list[tuple[str, bytes]]]:
    """Entry id -> (question, embedding) of each of its confirmed wordings."""
    if not entry_ids:
        return {}
    statement = select(Wording.entry_id, Wording.question, Wording.embedding).where(
        Wording.entry_id.in_(entry_ids), Wording.status == "confirmed"
    )
    found: dict[int, list[tuple[str, bytes]]] = {}
    for row in session.execute(statement):
        found.setdefault(row.entry_id, []).append((row.question, row.embedding))
    return found


def _best_wording_hit(entry: Entry, wordings: list[tuple[str, bytes]], query: np.ndarray) -> Hit:
    """The entry as a Hit scored by whichever of its question and confirmed wordings is nearest the query."""
    score, wording = max(
        [(cosine(query, entry.embedding), entry.question), *((cosine(query, e), q) for q, e in wordings)],
        key=lambda pair: pair[0],
    )
    return Hit(
        entry.id, entry.question, entry.answer, list(entry.answer_ids), score, entry.review,
        article_ids=tuple(entry.article_ids), wording=wording,
    )


def _fuse(hit: Hit, answer_cosine: float | None, bm25: float, weight: float) -> Hit:
    """The hit scored by its best wording or its answer, plus the weighted lexical part."""
    dense, wording = hit.score, hit.wording
    if answer_cosine is not None and answer_cosine > dense:
        dense, wording = answer_cosine, "(its answer)"
    return replace(hit, score=dense + weight * lexical.normalized(bm25), dense=dense, lexical=bm25, wording=wording)


def find_row(
    session: Session, normalized_question: str, context_key: str, model_id: str, prompt_hash: str
) -> Entry | None:
    """The newest entry with this exact key."""
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


def upsert_row(session: Session, new: NewAnswer, vector: np.ndarray) -> Entry:
    """The entry with the same exact key, updated, or a new one; flushed so it has an id."""
    now = utc_now()
    normalized = normalize_question(new.question)
    entry = find_row(session, normalized, new.context_key, new.model_id, new.prompt_hash)
    # An approved answer is never overwritten by other text: staff approved those words, not the new ones.
    if entry is None or (entry.review == "approved" and entry.answer != new.answer):
        entry = Entry(created_at=now, hits=0, uses=0)
        session.add(entry)
    if entry.answer != new.answer or entry.review is None:
        entry.review = new.review  # a review was of the old text; the same text keeps its review
    entry.question, entry.normalized_question = new.question, normalized
    entry.context, entry.context_key = new.context, new.context_key
    entry.answer, entry.answer_ids = new.answer, [int(i) for i in new.answer_ids]
    entry.model_id, entry.prompt_hash = new.model_id, new.prompt_hash
    entry.article_ids = [str(i) for i in new.article_ids]
    entry.stats, entry.speedup = dict(new.stats), new.speedup
    entry.embedding = to_bytes(vector)
    entry.updated_at = entry.last_used_at = now
    session.flush()
    return entry


def evict_over_limit(backend: Backend) -> None:
    """Over max_entries, delete the least useful entries: fewest hits + uses, then least recently used."""
    with backend.sessions.begin() as session:
        if session.scalar(select(func.count(Entry.id))) <= backend.max_entries:
            return
        seq = changes.begin(session)  # waits for other writers; one of them may have evicted meanwhile
        excess = session.scalar(select(func.count(Entry.id))) - backend.max_entries
        if excess <= 0:
            return
        usefulness = (Entry.hits + Entry.uses, Entry.last_used_at, Entry.id)
        victims = session.scalars(select(Entry.id).order_by(*usefulness).limit(excess)).all()
        session.execute(delete(Entry).where(Entry.id.in_(victims)))
        changes.record(session, seq, entry_ids=victims)
    backend.index.remove(victims)
