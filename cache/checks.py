"""Argument checks shared by the cache's parts, so every method words a bad argument the same way."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cache.records import REVIEW_STATES


def check_threshold(threshold: float) -> None:
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be within [-1, 1] (cosine similarity), got {threshold}")


def check_page(limit: int, offset: int) -> None:
    if limit < 1 or offset < 0:
        raise ValueError(f"need limit >= 1 and offset >= 0, got limit={limit}, offset={offset}")


def check_review(review: str) -> None:
    if review not in REVIEW_STATES:
        raise ValueError(f"review must be one of {', '.join(REVIEW_STATES)}, not {review!r}")


def get_or_raise(session: Session, model: type, key):
    """The row of `model` with primary key `key`; KeyError when there is none."""
    row = session.get(model, key)
    if row is None:
        raise KeyError(f"no {model.__name__.lower()} with id {key!r}")
    return row
