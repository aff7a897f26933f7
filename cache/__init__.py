"""Storage for past answers, served replies and knowledge-base articles; knows nothing about LLMs."""

from cache.browse import SORTS
from cache.embedder import Embedder
from cache.records import (
    OUTCOMES,
    REVIEW_STATES,
    UNANSWERED,
    ArticleHit,
    ArticleRecord,
    CachedAnswer,
    DashboardStats,
    EntryPage,
    Hit,
    MergeResult,
    NewAnswer,
    NewReply,
    QuestionCount,
    ReplyRecord,
    Suggestion,
    WordingRecord,
)
from cache.staff import AuditFilter, AuditRecord, ProposalRecord, StaffRecord, StaffStore
from cache.store import AnswerCache
from cache.text import normalize_question
from cache.vector_index import IndexHit, VectorIndex

__all__ = [
    "OUTCOMES",
    "REVIEW_STATES",
    "UNANSWERED",
    "SORTS",
    "AnswerCache",
    "ArticleHit",
    "ArticleRecord",
    "AuditFilter",
    "AuditRecord",
    "CachedAnswer",
    "DashboardStats",
    "Embedder",
    "EntryPage",
    "Hit",
    "IndexHit",
    "NewAnswer",
    "MergeResult",
    "NewReply",
    "ProposalRecord",
    "QuestionCount",
    "ReplyRecord",
    "StaffRecord",
    "StaffStore",
    "Suggestion",
    "VectorIndex",
    "WordingRecord",
    "normalize_question",
]
