"""Staff accounts, their edit proposals and the audit log: tables on the cache's Base, kept apart from AnswerCache.

Only storage: password hashes arrive already hashed and roles are plain strings; who may do what is decided
in `chatbot`. Audit rows name an entry by id without a foreign key, so an entry's history outlives the entry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import JSON, Engine, Integer, String, Text, delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from cache.schema import DB_FILE, Base, UtcDateTime, create_db_engine, startup_lock, utc_now

EXPORT_BATCH = 500


class StaffUser(Base):
    __tablename__ = "staff_users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    role: Mapped[str] = mapped_column(String(32))
    password_hash: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)


class AuditRow(Base):
    """One staff action: who, when, what, on which entry (or other target), with details."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now, index=True)
    actor: Mapped[str] = mapped_column(String(255), index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    entry_id: Mapped[int | None] = mapped_column(Integer, index=True)
    target: Mapped[str] = mapped_column(String(255), default="")  # "article:ID", "user:NAME", a file name
    details: Mapped[dict] = mapped_column(JSON)


class ProposalRow(Base):
    """An agent's proposed edit of a cached answer, waiting for an admin to apply or dismiss it."""

    __tablename__ = "edit_proposals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entry_id: Mapped[int] = mapped_column(Integer, index=True)
    question: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    proposed_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)  # pending, applied, dismissed
    decided_by: Mapped[str] = mapped_column(String(255), default="")


STAFF_TABLES = [StaffUser.__table__, AuditRow.__table__, ProposalRow.__table__]


@dataclass(frozen=True)
class StaffRecord:
    name: str
    role: str
    password_hash: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    action: str
    entry_id: int | None
    target: str
    details: dict

    def to_json(self) -> dict:
        return {
            "id": self.id, "at": self.at.isoformat(), "actor": self.actor, "action": self.action,
            "entry_id": self.entry_id, "target": self.target, "details": self.details,
        }


@dataclass(frozen=True)
class AuditFilter:
    """Which audit rows to show; empty fields match everything."""

    actor: str = ""
    action: str = ""
    entry_id: int | None = None


@dataclass(frozen=True)
class ProposalRecord:
    id: int
    entry_id: int
    question: str
    answer: str
    proposed_by: str
    created_at: datetime
    status: str
    decided_by: str


ALL = AuditFilter()  # no filter: every row


class StaffStore:
    """Accounts, proposals and the audit log; safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._lock = threading.Lock()  # SQLite allows one writer; serialize ours instead of waiting on busy

    @classmethod
    def open(cls, data_dir: str | Path, url: str | None = None) -> StaffStore:
        """The staff tables in the cache's database (SQLite in `data_dir`, or `url`); created when missing."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_db_engine(url or f"sqlite:///{data_dir / DB_FILE}")
        with startup_lock(engine):  # replicas starting at once on a new database would both CREATE TABLE
            Base.metadata.create_all(engine, tables=STAFF_TABLES)
        return cls(engine)

    def close(self) -> None:
        self._engine.dispose()

    # --- accounts ----------------------------------------------------------------------------------

    def get_user(self, name: str) -> StaffRecord | None:
        with self._sessions() as session:
            row = session.scalar(select(StaffUser).where(StaffUser.name == name))
            return _staff(row) if row is not None else None

    def list_users(self) -> list[StaffRecord]:
        with self._sessions() as session:
            return [_staff(row) for row in session.scalars(select(StaffUser).order_by(StaffUser.name))]

    def count_users(self, role: str | None = None) -> int:
        query = select(func.count()).select_from(StaffUser)
        if role is not None:
            query = query.where(StaffUser.role == role)
        with self._sessions() as session:
            return session.scalar(query)

    def add_user(self, name: str, role: str, password_hash: str) -> None:
        """ValueError when the name is taken."""
        taken = f"there is already a staff account named {name!r}"
        try:
            with self._lock, self._sessions.begin() as session:
                if session.scalar(select(StaffUser.id).where(StaffUser.name == name)) is not None:
                    raise ValueError(taken)
                session.add(StaffUser(name=name, role=role, password_hash=password_hash))
        except IntegrityError as err:  # another replica added the name between the check and the insert
            raise ValueError(taken) from err

    def update_user(self, name: str, role: str | None = None, password_hash: str | None = None) -> bool:
        with self._lock, self._sessions.begin() as session:
            row = session.scalar(select(StaffUser).where(StaffUser.name == name))
            if row is None:
                return False
            row.role = role or row.role
            row.password_hash = password_hash or row.password_hash
            row.updated_at = utc_now()
            return True

    def remove_user(self, name: str) -> bool:
        with self._lock, self._sessions.begin() as session:
            return session.execute(delete(StaffUser).where(StaffUser.name == name)).rowcount > 0

    # --- audit log ---------------------------------------------------------------------------------

    def record(
        self, actor: str, action: str, entry_id: int | None = None, target: str = "", details: dict | None = None
    ) -> int:
        """Append one audit row; returns its id."""
        row = AuditRow(actor=actor, action=action, entry_id=entry_id, target=target, details=details or {})
        with self._lock, self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return row.id

    def audit(self, which: AuditFilter = ALL, limit: int = 200) -> list[AuditRecord]:
        """The newest matching rows first."""
        query = _filtered(select(AuditRow), which).order_by(AuditRow.id.desc()).limit(limit)
        with self._sessions() as session:
            return [_audit(row) for row in session.scalars(query)]

    def iter_audit(self, which: AuditFilter = ALL) -> Iterator[AuditRecord]:
        """Every matching row, oldest first, read in batches (for export)."""
        last_id = 0
        while True:
            query = _filtered(select(AuditRow), which).where(AuditRow.id > last_id)
            with self._sessions() as session:
                batch = [_audit(row) for row in session.scalars(query.order_by(AuditRow.id).limit(EXPORT_BATCH))]
            yield from batch
            if len(batch) < EXPORT_BATCH:
                return
            last_id = batch[-1].id

    # --- edit proposals ----------------------------------------------------------------------------

    def add_proposal(self, entry_id: int, question: str, answer: str, proposed_by: str) -> int:
        row = ProposalRow(entry_id=entry_id, question=question, answer=answer, proposed_by=proposed_by)
        with self._lock, self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return row.id

    def get_proposal(self, proposal_id: int) -> ProposalRecord | None:
        with self._sessions() as session:
            row = session.get(ProposalRow, proposal_id)
            return _proposal(row) if row is not None else None

    def pending_proposals(self, limit: int = 100) -> list[ProposalRecord]:
        query = select(ProposalRow).where(ProposalRow.status == "pending").order_by(ProposalRow.id).limit(limit)
        with self._sessions() as session:
            return [_proposal(row) for row in session.scalars(query)]

    def decide_proposal(self, proposal_id: int, status: str, decided_by: str) -> bool:
        """Mark a pending proposal applied or dismissed; False when it is not pending (any more)."""
        with self._lock, self._sessions.begin() as session:
            row = session.get(ProposalRow, proposal_id)
            if row is None or row.status != "pending":
                return False
            row.status, row.decided_by = status, decided_by
            return True


def _filtered(query, which: AuditFilter):
    if which.actor:
        query = query.where(AuditRow.actor == which.actor)
    if which.action:
        query = query.where(AuditRow.action == which.action)
    if which.entry_id is not None:
        query = query.where(AuditRow.entry_id == which.entry_id)
    return query


def _staff(row: StaffUser) -> StaffRecord:
    return StaffRecord(row.name, row.role, row.password_hash, row.created_at, row.updated_at)


def _audit(row: AuditRow) -> AuditRecord:
    return AuditRecord(row.id, row.at, row.actor, row.action, row.entry_id, row.target, dict(row.details or {}))


def _proposal(row: ProposalRow) -> ProposalRecord:
    return ProposalRecord(
        row.id, row.entry_id, row.question, row.answer, row.proposed_by, row.created_at, row.status, row.decided_by
    )
