"""SQLAlchemy rows: cached answers, served replies, knowledge-base articles and cache settings."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    create_engine,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SQLITE_BUSY_TIMEOUT_MS = 30_000


def utc_now() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator):
    """A timezone-aware UTC datetime on every database (SQLite stores it naive, so tag it on the way out)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass a timezone-aware one")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """A cached answer: served again on an exact repeat, or used as a decoding reference."""

    __tablename__ = "entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    question: Mapped[str] = mapped_column(Text)
    normalized_question: Mapped[str] = mapped_column(Text, index=True)
    context: Mapped[str] = mapped_column(Text, default="")
    context_key: Mapped[str] = mapped_column(String(255), index=True, default="")
    answer: Mapped[str] = mapped_column(Text)
    answer_ids: Mapped[list[int]] = mapped_column(JSON)
    model_id: Mapped[str] = mapped_column(String(255))
    prompt_hash: Mapped[str] = mapped_column(String(255), default="")
    article_ids: Mapped[list[str]] = mapped_column(JSON)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)  # float32 bytes, so the index can be rebuilt
    stats: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    last_used_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    uses: Mapped[int] = mapped_column(Integer, default=0)


class Reply(Base):
    """One chat turn as it was served."""

    __tablename__ = "replies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entry_id: Mapped[int | None] = mapped_column(ForeignKey("entries.id", ondelete="SET NULL"), index=True)
    question: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    history: Mapped[list] = mapped_column(JSON)
    stats: Mapped[dict] = mapped_column(JSON)
    reference_entry_ids: Mapped[list[int]] = mapped_column(JSON)
    exact_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    feedback: Mapped[int | None] = mapped_column(Integer)
    feedback_reason: Mapped[str] = mapped_column(Text, default="")
    verified: Mapped[bool | None] = mapped_column(Boolean)
    measured_speedup: Mapped[float | None] = mapped_column(Float)
    session_id: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now, index=True)


class Article(Base):
    """A knowledge-base article, found by meaning through its title and body."""

    __tablename__ = "articles"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)


class Setting(Base):
    """Cache metadata such as the embedding dim and embedder name the stored vectors came from."""

    __tablename__ = "cache_settings"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


def create_db_engine(url: str) -> Engine:
    """An engine for any SQLAlchemy URL; SQLite gets WAL, a busy timeout and foreign keys."""
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _configure_sqlite)
    return engine


def _configure_sqlite(dbapi_connection, _connection_record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")  # so deleting an entry sets replies.entry_id to NULL
    cursor.close()
