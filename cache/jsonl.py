"""JSON Lines export and import of cached answers and articles; one record per line with a "kind"."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cache.records import REVIEW_STATES, ArticleRecord, CachedAnswer, NewAnswer
from cache.schema import legacy_stat

_REQUIRED = object()


@dataclass(frozen=True)
class ImportedEntry:
    answer: NewAnswer
    hits: int
    uses: int
    created_at: datetime | None
    last_used_at: datetime | None
    wordings: list[str] = field(default_factory=list)  # confirmed wordings; suggestions are not exported


@dataclass(frozen=True)
class ImportedArticle:
    id: str
    title: str
    body: str


def entry_line(entry: CachedAnswer, wordings: list[str] = ()) -> dict:
    """One entry as a record, with its confirmed wordings."""
    return {
        "kind": "entry",
        "question": entry.question,
        "context": entry.context,
        "context_key": entry.context_key,
        "answer": entry.answer,
        "answer_ids": entry.answer_ids,
        "model_id": entry.model_id,
        "prompt_hash": entry.prompt_hash,
        "article_ids": entry.article_ids,
        "stats": entry.stats,  # opaque, for display: the typed fields around it are what import reads
        "speedup": entry.speedup,
        "review": entry.review,
        "hits": entry.hits,
        "uses": entry.uses,
        "created_at": entry.created_at.isoformat(),
        "last_used_at": entry.last_used_at.isoformat(),
        "wordings": list(wordings),
    }


def article_line(article: ArticleRecord) -> dict:
    return {"kind": "article", "id": article.id, "title": article.title, "body": article.body}


def parse_lines(lines: Iterable[str]) -> tuple[list[ImportedEntry], list[ImportedArticle]]:
    """Every record in `lines`; the first bad one raises ValueError naming its 1-based line number."""
    entries, articles = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("expected a JSON object")
            kind = _field(record, "kind", str)
            if kind == "entry":
                entries.append(_parse_entry(record))
            elif kind == "article":
                articles.append(_parse_article(record))
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except ValueError as error:
            raise ValueError(f"line {number}: {error}") from error
    return entries, articles


def _parse_entry(record: dict) -> ImportedEntry:
    answer = NewAnswer(
        question=_field(record, "question", str),
        answer=_field(record, "answer", str),
        answer_ids=_int_list(_field(record, "answer_ids", list), "answer_ids"),
        model_id=_field(record, "model_id", str),
        context=_field(record, "context", str, ""),
        context_key=_field(record, "context_key", str, ""),
        prompt_hash=_field(record, "prompt_hash", str, ""),
        article_ids=_str_list(_field(record, "article_ids", list, []), "article_ids"),
        stats=_field(record, "stats", dict, {}),
        review=_review(record),
        speedup=_speedup(record),
    )
    return ImportedEntry(
        answer=answer,
        hits=_count(record, "hits"),
        uses=_count(record, "uses"),
        created_at=_timestamp(record, "created_at"),
        last_used_at=_timestamp(record, "last_used_at"),
        wordings=_str_list(_field(record, "wordings", list, []), "wordings"),
    )


def _speedup(record: dict) -> float | None:
    """The typed "speedup" field, or for a file exported before it existed, the one inside its stats."""
    if "speedup" not in record:
        return _speedup_from_old_stats(record)
    value = record["speedup"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError("field 'speedup' should be a number or null")
    return float(value) if value is not None else None


def _speedup_from_old_stats(record: dict) -> float | None:
    """Files exported before entries carried a typed "speedup" had it only inside "stats"."""
    return legacy_stat(_field(record, "stats", dict, {}), "speedup")


def _parse_article(record: dict) -> ImportedArticle:
    article_id = _field(record, "id", str)
    if not article_id.strip():
        raise ValueError("field 'id' is empty")
    return ImportedArticle(article_id, _field(record, "title", str), _field(record, "body", str))


def _field(record: dict, name: str, kind: type, default=_REQUIRED):
    value = record.get(name, default)
    if value is _REQUIRED:
        raise ValueError(f"missing field {name!r}")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"field {name!r} should be a {kind.__name__}")
    return value


def _review(record: dict) -> str:
    review = _field(record, "review", str, "candidate")
    if review not in REVIEW_STATES:
        raise ValueError(f"field 'review' must be one of {', '.join(REVIEW_STATES)}")
    return review


def _int_list(values: list, name: str) -> list[int]:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"field {name!r} should hold integers")
    return values


def _str_list(values: list, name: str) -> list[str]:
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"field {name!r} should hold strings")
    return values


def _count(record: dict, name: str) -> int:
    value = _field(record, name, int, 0)
    if value < 0:
        raise ValueError(f"field {name!r} is negative")
    return value


def _timestamp(record: dict, name: str) -> datetime | None:
    text = _field(record, name, str, "")
    if not text:
        return None
    moment = datetime.fromisoformat(text)  # raises ValueError on a bad date
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
