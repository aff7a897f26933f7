"""BM25 over the wordings of approved entries: the lexical half of a hybrid match (bm25s, English stemming).

The dense index finds meaning; BM25 finds the rare words a customer shares with a wording ("invoice", "2FA")
that a small embedding model blurs. Only approved entries are indexed, since only they may ground a reply,
and staff curate them (hundreds, not the thousands of the model's own answers): the whole index is rebuilt
from the rows, in a few milliseconds, whenever the change log moved since it was built.
Cost: rebuild O(total wording tokens); a query O(query tokens x matching wordings).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import bm25s
import Stemmer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cache.schema import Entry, Wording

# PyStemmer's stemmers are not thread-safe, and several customers' questions are matched at once: one per thread.
_STEMMERS = threading.local()
# A BM25 score s becomes s / (s + LEXICAL_HALF) in [0, 1): half its weight at s = 2, about one rare word
# shared. Chosen with the fusion weight on the tuning half of the shipped question groups (bench/retrieval.py).
LEXICAL_HALF = 2.0


def english_stemmer() -> Stemmer.Stemmer:
    """This thread's English stemmer."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return stemmer


@dataclass(frozen=True)
class LexicalSnapshot:
    """A built BM25 index and the entry each of its documents (wordings) belongs to."""

    seq: int  # the change number the rows were read at
    entry_ids: list[int] = field(default_factory=list)  # document i belongs to entry_ids[i]
    retriever: bm25s.BM25 | None = None

    def scores(self, question: str) -> dict[int, float]:
        """Each entry's best BM25 score over its wordings, for entries sharing a word with `question`."""
        if self.retriever is None:
            return {}
        tokens = bm25s.tokenize([question], stopwords="en", stemmer=english_stemmer(), return_ids=False,
                                show_progress=False)
        if not tokens[0]:
            return {}
        best: dict[int, float] = {}
        for doc, score in enumerate(self.retriever.get_scores(tokens[0])):
            if score > 0 and score > best.get(self.entry_ids[doc], 0.0):
                best[self.entry_ids[doc]] = float(score)
        return best


class LexicalIndex:
    """This replica's BM25 snapshot, rebuilt when the change log moved past the number it was built at."""

    def __init__(self, sessions: sessionmaker) -> None:
        self._sessions = sessions
        self._snapshot = LexicalSnapshot(seq=-1)  # replaced whole, so readers need no lock

    def scores(self, question: str, seq: int) -> dict[int, float]:
        """Best BM25 score per approved entry, from an index holding every change up to `seq`."""
        snapshot = self._snapshot
        if snapshot.seq != seq:
            with self._sessions() as session:
                snapshot = build(session, seq)
            self._snapshot = snapshot
        return snapshot.scores(question)


def build(session: Session, seq: int) -> LexicalSnapshot:
    """A BM25 index of every approved entry's question and confirmed wordings, read in `session`."""
    questions = session.execute(select(Entry.id, Entry.question).where(Entry.review == "approved")).all()
    wordings = session.execute(
        select(Wording.entry_id, Wording.question)
        .join(Entry, Entry.id == Wording.entry_id)
        .where(Entry.review == "approved", Wording.status == "confirmed")
    ).all()
    docs = [(row.id, row.question) for row in questions] + [(row.entry_id, row.question) for row in wordings]
    if not docs:
        return LexicalSnapshot(seq)
    corpus = bm25s.tokenize([text for _, text in docs], stopwords="en", stemmer=english_stemmer(), show_progress=False)
    if not corpus.vocab:  # only stopwords: bm25s cannot index an empty vocabulary
        return LexicalSnapshot(seq)
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return LexicalSnapshot(seq, [entry_id for entry_id, _ in docs], retriever)


def normalized(score: float) -> float:
    """A BM25 score squashed into [0, 1), so it adds to a cosine on one scale."""
    return score / (score + LEXICAL_HALF) if score > 0 else 0.0
