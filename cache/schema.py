"""SQLAlchemy rows: cached answers, served replies, knowledge-base articles, cache and deployment settings."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
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
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DB_FILE = "cache.sqlite3"  # the SQLite file in a data folder, when no database URL is given
SQLITE_BUSY_TIMEOUT_MS = 30_000
STARTUP_LOCK_KEY = 0x11A_CAC4E  # any constant: the PostgreSQL advisory lock replicas take while opening


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
    stats: Mapped[dict] = mapped_column(JSON)  # the reply's stats as the chat service wrote them, for display
    # "approved" (by staff, edited by staff, or imported as approved), "candidate" (the model's own, unreviewed)
    # or "rejected" (never used to guide a reply).
    review: Mapped[str] = mapped_column(String(16), default="candidate", server_default="candidate", index=True)
    speedup: Mapped[float | None] = mapped_column(Float, index=True)  # of the reply that stored it, for sorting
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    last_used_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    uses: Mapped[int] = mapped_column(Integer, default=0)


class Wording(Base):
    """Another wording of an entry's question. Only `confirmed` ones (attached or confirmed by staff) are
    indexed and match; `suggested` ones are customer questions an approved entry grounded, waiting for staff."""

    __tablename__ = "wordings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), index=True)
    question: Mapped[str] = mapped_column(Text)
    normalized_question: Mapped[str] = mapped_column(Text)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)  # float32 bytes, as Entry.embedding
    status: Mapped[str] = mapped_column(String(16), default="suggested", index=True)  # or "confirmed"
    created_by: Mapped[str] = mapped_column(String(255), default="")  # staff name; "" for a customer's suggestion
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)


class Reply(Base):
    """One chat turn as it was served."""

    __tablename__ = "replies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entry_id: Mapped[int | None] = mapped_column(ForeignKey("entries.id", ondelete="SET NULL"), index=True)
    question: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    history: Mapped[list] = mapped_column(JSON)
    stats: Mapped[dict] = mapped_column(JSON)  # for display; the dashboard reads the columns below
    speedup: Mapped[float | None] = mapped_column(Float)
    seconds: Mapped[float | None] = mapped_column(Float)
    greedy_seconds: Mapped[float | None] = mapped_column(Float)  # the estimate the speedup was computed from
    tokens_per_forward_pass: Mapped[float | None] = mapped_column(Float)  # None: not measured (one-token steps)
    stop_reason: Mapped[str | None] = mapped_column(String(16))  # "eos", "repetition", "limit"; None: not recorded
    prompt_ids: Mapped[list[int] | None] = mapped_column(JSON)  # so that Verify can rerun exactly this decode
    token_ids: Mapped[list[int] | None] = mapped_column(JSON)
    reference_entry_ids: Mapped[list[int]] = mapped_column(JSON)
    exact_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    # An approved answer backed the reply (True), none did (False: staff may need to write one); None: served
    # before this was recorded.
    backed: Mapped[bool | None] = mapped_column(Boolean)
    # What the customer was shown (records.OUTCOMES) and the check that decided a cut or a hand-off; None: served
    # before it was recorded.
    outcome: Mapped[str | None] = mapped_column(String(16))
    outcome_reason: Mapped[str | None] = mapped_column(Text)
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


class DeploymentSetting(Base):
    """A value every replica sharing this database agrees on: the first to claim a name wins (cache/deployment.py)."""

    __tablename__ = "deployment_settings"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    set_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)


class ChangeCounter(Base):
    """One row: the number of the newest change. Writers bump it first, so changes commit in number order."""

    __tablename__ = "change_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, default=0)


class Change(Base):
    """An entry or article written or deleted by change number `seq`; replicas replay these into their index."""

    __tablename__ = "changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    seq: Mapped[int] = mapped_column(BigInteger, index=True)
    entry_id: Mapped[int | None] = mapped_column(Integer)
    article_id: Mapped[str | None] = mapped_column(String(255))


def create_db_engine(url: str) -> Engine:
    """An engine for any SQLAlchemy URL; SQLite gets WAL, a busy timeout and foreign keys. A server
    database (e.g. postgresql+psycopg://) gets pre-ping, so a restarted server costs no failed request."""
    if url.startswith("sqlite"):
        engine = create_engine(url)
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(url, pool_pre_ping=True)


@contextmanager
def startup_lock(engine: Engine) -> Iterator[None]:
    """Held while a process creates or upgrades the schema, so replicas starting at once take turns
    (two concurrent CREATE TABLEs collide): a PostgreSQL advisory lock, or a lock file beside a SQLite file."""
    if engine.dialect.name == "postgresql":
        with _advisory_lock(engine):
            yield
    elif engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        with open(f"{engine.url.database}.lock", "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
            yield
    else:
        yield


@contextmanager
def _advisory_lock(engine: Engine) -> Iterator[None]:
    with engine.connect() as connection:
        connection.execute(select(func.pg_advisory_lock(STARTUP_LOCK_KEY)))
        connection.commit()
        try:
            yield
        finally:
            connection.execute(select(func.pg_advisory_unlock(STARTUP_LOCK_KEY)))
            connection.commit()


def create_schema(engine: Engine) -> None:
    """Create missing tables and columns (which is how older databases are upgraded) and the counter.

    Callers hold `startup_lock`, so two replicas never add the same column at once.
    """
    Base.metadata.create_all(engine)
    added = add_missing_columns(engine)
    if added:
        backfill_timing_columns(engine, added)
    with engine.begin() as connection:
        if connection.scalar(select(func.count()).select_from(ChangeCounter)) == 0:
            connection.execute(ChangeCounter.__table__.insert().values(id=1, seq=0))


def add_missing_columns(engine: Engine) -> set[str]:
    """ALTER TABLE ... ADD COLUMN for every mapped column an older database lacks; returns "table.column" names.

    New columns are nullable or have a server default, so existing rows stay valid.
    """
    existing = inspect(engine)
    added = set()
    with engine.begin() as connection:
        for table in Base.metadata.sorted_tables:
            have = {column["name"] for column in existing.get_columns(table.name)}
            for column in table.columns:
                if column.name in have:
                    continue
                kind = column.type.compile(dialect=engine.dialect)
                default = f" DEFAULT '{column.server_default.arg}'" if column.server_default is not None else ""
                connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{default}'))
                added.add(f"{table.name}.{column.name}")
    return added


def backfill_timing_columns(engine: Engine, added: set[str]) -> None:
    """One-time migration: fill the typed columns just added from the stats JSON older rows hold.

    The only place (with jsonl's import of old files) that reads the stats blob by key: once a column
    exists, writers fill it and the blob is for display only.
    """
    with engine.begin() as connection:
        if "entries.speedup" in added:
            for row in connection.execute(select(Entry.id, Entry.stats)).all():
                speedup = legacy_stat(row.stats, "speedup")
                connection.execute(update(Entry).where(Entry.id == row.id).values(speedup=speedup))
        if added & {"replies.speedup", "replies.tokens_per_forward_pass"}:
            for row in connection.execute(select(Reply.id, Reply.stats)).all():
                values = _legacy_reply_values(row.stats, added)
                connection.execute(update(Reply).where(Reply.id == row.id).values(**values))


def _legacy_reply_values(stats: dict, added: set[str]) -> dict:
    """The values of the just-added reply columns that an old row's stats JSON holds."""
    stats = stats if isinstance(stats, dict) else {}
    values = {}
    if "replies.speedup" in added:
        values.update(
            speedup=legacy_stat(stats, "speedup"), seconds=legacy_stat(stats, "seconds"),
            greedy_seconds=legacy_stat(stats, "greedy_seconds_estimate"),
            prompt_ids=stats.get("prompt_ids"), token_ids=stats.get("token_ids"),
        )
    if "replies.tokens_per_forward_pass" in added:
        values["tokens_per_forward_pass"] = legacy_stat(stats, "tokens_per_forward_pass")
    return values


def legacy_stat(stats: dict, key: str) -> float | None:
    """stats[key] as a float, or None when missing or not a number: for rows and files older than the columns."""
    value = stats.get(key) if isinstance(stats, dict) else None
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if is_number else None


def _configure_sqlite(dbapi_connection, _connection_record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")  # so deleting an entry sets replies.entry_id to NULL
    cursor.close()
