"""What the chat service hands back: replies, the copied spans in them, what they drew on, verifications."""

from dataclasses import dataclass, field

from cache.records import ArticleRecord, CachedAnswer

from .stats import ReplyStats


@dataclass(frozen=True)
class Span:
    """Characters of the reply text that were copied from a reference (for highlighting)."""

    start: int
    end: int
    source: str  # "cache:<entry id>", "prompt" or "reply"


@dataclass(frozen=True)
class Reply:
    """A reply, partial while streaming (`done` False) and final at the end."""

    text: str
    stats: ReplyStats
    done: bool = False
    id: int | None = None  # the stored reply's id, once done
    spans: list[Span] = field(default_factory=list)
    notice: str = ""  # something the user should know, e.g. that old turns were left out
    # `text` is what the customer is shown: `model_text`, the model's reply or a prefix of it cut at its last
    # supported sentence, then `staff_text`, staff's own words shown as such (an article's passage, the hand-off).
    model_text: str = ""
    staff_text: str = ""


@dataclass(frozen=True)
class ReplyReferences:
    """What a reply drew on, as stored now: its reference entries by id (None once deleted) and its article."""

    entries: dict[int, CachedAnswer | None]
    article: ArticleRecord | None


@dataclass(frozen=True)
class Verification:
    reply_id: int
    identical: bool
    greedy_seconds: float
    reply_seconds: float
    measured_speedup: float
