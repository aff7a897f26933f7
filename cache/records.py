"""Plain dataclasses the cache takes and returns, so no caller ever holds an ORM row."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, kw_only=True)
class NewAnswer:
    """An answer to cache; (normalized question, context_key, model_id, prompt_hash) identify it."""

    question: str
    answer: str
    answer_ids: list[int]
    model_id: str
    context: str = ""
    context_key: str = ""
    prompt_hash: str = ""
    article_ids: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    review: str = "candidate"
    speedup: float | None = None


REVIEW_STATES = ("approved", "candidate", "rejected")


@dataclass(frozen=True)
class CachedAnswer:
    id: int
    question: str
    normalized_question: str
    context: str
    context_key: str
    answer: str
    answer_ids: list[int]
    model_id: str
    prompt_hash: str
    article_ids: list[str]
    stats: dict
    review: str
    speedup: float | None
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime
    hits: int
    uses: int


@dataclass(frozen=True)
class Hit:
    """A similar past answer; `score` is the cosine similarity in [-1, 1] of its best-matching wording (its
    question or a confirmed wording), plus the lexical part for a hybrid `match`."""

    id: int
    question: str
    answer: str
    answer_ids: list[int]
    score: float
    review: str = "candidate"
    article_ids: tuple[str, ...] = ()  # the help articles the entry was answered with
    wording: str = ""  # the wording that matched best (the question itself or a confirmed wording)
    dense: float | None = None  # for a hybrid match: the cosine part of `score`
    lexical: float = 0.0  # for a hybrid match: the BM25 score of the entry's best wording (0: none)


WORDING_STATES = ("confirmed", "suggested")


@dataclass(frozen=True)
class WordingRecord:
    """One wording of an entry's question; only confirmed ones match."""

    id: int
    entry_id: int
    question: str
    status: str
    created_by: str
    created_at: datetime


@dataclass(frozen=True)
class Suggestion:
    """A suggested wording with the entry it would match, for staff to confirm or drop."""

    wording: WordingRecord
    entry_question: str
    entry_answer: str


@dataclass(frozen=True)
class MergeResult:
    """What merging one entry into another moved: its question became a wording of the kept entry."""

    kept_id: int
    merged_id: int
    moved_wordings: int  # wordings of the merged entry now on the kept one, its question included
    moved_replies: int


@dataclass(frozen=True)
class EntryPage:
    entries: list[CachedAnswer]
    total: int


# The stop reason of a served reply that was not decoded: nothing covered its question and the customer got the
# hand-off message (chatbot.settings.ChatSettings.uncovered).
HANDED_OFF = "handed off"
# What a customer was shown (the replies' `outcome`): the model's whole reply, its reply cut at the last sentence
# the sources support, staff's own text shown as such (a help article's passage), the hand-off message, or the
# decline of a message that tries to change the assistant's instructions or to have it act on an account's sign-in.
# The last three are not decoded.
ANSWERED, CUT, STAFF_TEXT, DECLINED = "answered", "cut", "staff text", "declined"
OUTCOMES = (ANSWERED, CUT, STAFF_TEXT, HANDED_OFF, DECLINED)
NOT_DECODED = (STAFF_TEXT, HANDED_OFF, DECLINED)
UNANSWERED = (CUT, STAFF_TEXT, HANDED_OFF)  # what staff list to write the answers that are missing


@dataclass(frozen=True, kw_only=True)
class NewReply:
    """A chat turn as served; `entry_id` is the cached answer it was served from or stored as."""

    question: str
    answer: str
    entry_id: int | None = None
    history: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    speedup: float | None = None
    seconds: float | None = None
    greedy_seconds: float | None = None
    tokens_per_forward_pass: float | None = None  # None: not measured; the dashboard plots it
    # how the reply ended: "eos", "repetition", "limit" (the token limit), or "handed off" (not decoded)
    stop_reason: str | None = None
    prompt_ids: list[int] | None = None
    token_ids: list[int] | None = None
    reference_entry_ids: list[int] = field(default_factory=list)
    exact_hit: bool = False
    session_id: str = ""
    backed: bool | None = None  # an approved answer backed it; None: not known
    outcome: str | None = None  # one of OUTCOMES; None: served before it was recorded
    outcome_reason: str = ""  # the check that cut or handed off the reply, in words for staff


@dataclass(frozen=True)
class ReplyRecord:
    id: int
    entry_id: int | None
    question: str
    answer: str
    history: list
    stats: dict
    speedup: float | None
    seconds: float | None
    greedy_seconds: float | None
    prompt_ids: list[int] | None
    token_ids: list[int] | None
    reference_entry_ids: list[int]
    exact_hit: bool
    feedback: int | None
    feedback_reason: str
    verified: bool | None
    measured_speedup: float | None
    session_id: str
    created_at: datetime
    tokens_per_forward_pass: float | None = None
    stop_reason: str | None = None
    outcome: str | None = None
    outcome_reason: str = ""


@dataclass(frozen=True)
class ArticleRecord:
    id: str
    title: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ArticleHit:
    id: str
    title: str
    body: str
    score: float


@dataclass(frozen=True)
class QuestionCount:
    question: str
    count: int


@dataclass(frozen=True)
class DashboardStats:
    """Totals over all replies; rates are fractions in [0, 1], speedups are None with no data."""

    entries: int
    articles: int
    replies: int
    exact_hits: int
    exact_hit_rate: float
    reference_hit_rate: float
    mean_speedup: float | None
    median_speedup: float | None
    seconds_saved: float
    positive_feedback: int
    negative_feedback: int
    top_questions: list[QuestionCount]
    replies_without_references: int
    top_unreferenced_questions: list[QuestionCount]
    # Replies no approved answer backed, and the questions most often among them: what staff could answer next.
    replies_not_backed: int = 0
    top_unbacked_questions: list[QuestionCount] = field(default_factory=list)
    replies_handed_off: int = 0  # of those, how many got the hand-off message instead of a decoded reply
