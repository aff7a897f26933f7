"""Deployment-wide settings in the shared database: the first replica to claim a name decides its value."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from cache.schema import DeploymentSetting, utc_now


def read(sessions: sessionmaker, name: str) -> str | None:
    """The value stored under `name`, or None when no replica has claimed it yet."""
    with sessions() as session:
        return session.scalar(select(DeploymentSetting.value).where(DeploymentSetting.name == name))


def claim(sessions: sessionmaker, name: str, value: str) -> str:
    """Store `value` under `name` unless some replica already did; returns the value every replica now shares.

    The primary key decides a race: the losing insert fails with IntegrityError and reads the winner's value.
    """
    if not name:
        raise ValueError("a deployment setting needs a name")
    stored = read(sessions, name)
    if stored is not None:
        return stored
    try:
        with sessions.begin() as session:
            session.add(DeploymentSetting(name=name, value=value, set_at=utc_now()))
    except IntegrityError:
        pass  # another replica claimed it between our read and our insert: its value stands
    return read(sessions, name)
