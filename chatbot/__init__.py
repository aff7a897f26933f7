"""The chat service: one chat turn on top of the decoding engine and the answer cache, and the admin's tools.

The records the services return are re-exported here, so that the web UI needs no import from `cache`.
"""

from cache import (
    OUTCOMES,
    REVIEW_STATES,
    SORTS,
    UNANSWERED,
    ArticleRecord,
    AuditFilter,
    AuditRecord,
    CachedAnswer,
    DashboardStats,
    EntryPage,
    MergeResult,
    ProposalRecord,
    QuestionCount,
    ReplyRecord,
    StaffRecord,
    Suggestion,
    WordingRecord,
)

from .accounts import ACTIONS, ROLES, Accounts, Bootstrap, PermissionDenied, StaffAccount
from .admin import AdminService
from .admission import Admission, ChatBusy, ChatLimits
from .deployment import EngineSummary
from .prompt import InputError
from .replies import Reply, ReplyReferences, Span, Verification
from .seed import Seed
from .service import ChatService
from .settings import ChatSettings
from .stats import ArticleUse, ReferenceUse, ReplyStats

__all__ = [
    "OUTCOMES",
    "REVIEW_STATES",
    "UNANSWERED",
    "SORTS",
    "ACTIONS",
    "Accounts",
    "Admission",
    "AuditFilter",
    "AuditRecord",
    "Bootstrap",
    "ChatBusy",
    "ChatLimits",
    "PermissionDenied",
    "ProposalRecord",
    "ROLES",
    "StaffAccount",
    "StaffRecord",
    "AdminService",
    "ArticleUse",
    "ArticleRecord",
    "CachedAnswer",
    "ChatService",
    "ChatSettings",
    "DashboardStats",
    "EngineSummary",
    "EntryPage",
    "InputError",
    "MergeResult",
    "QuestionCount",
    "ReferenceUse",
    "Reply",
    "ReplyRecord",
    "ReplyReferences",
    "ReplyStats",
    "Seed",
    "Span",
    "Suggestion",
    "Verification",
    "WordingRecord",
]
