"""Staff accounts: roles, argon2 password hashes, the bootstrap admin, and user changes written to the audit log.

Roles: `agent` reads the cache, replies and feedback and proposes edits; `admin` may do everything.
"""

import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from cache import AuditFilter, StaffRecord, StaffStore

from .prompt import InputError

ROLES = ("agent", "admin")  # in rising order of rights
MIN_PASSWORD_CHARS = 8
NAME_CHARS = 64
# Audit action names; "approve", "reject" and "unreview" change the review state of cached answers.
REVIEW_ACTIONS = {"approved": "approve", "rejected": "reject", "candidate": "unreview"}
ALL = AuditFilter()  # no filter: every row
ACTIONS = (
    "login", "login_failed", "edit", "delete", "approve", "reject", "unreview", "propose", "dismiss_proposal", "import",
    "export", "article_save", "article_delete", "user_add", "user_reset", "user_role", "user_remove", "denied",
    "wording_add", "wording_remove", "wording_confirm", "wording_drop", "merge",
)


class PermissionDenied(Exception):
    """The acting user's role does not allow this action (or the user no longer exists)."""


@dataclass(frozen=True)
class StaffAccount:
    name: str
    role: str


@dataclass(frozen=True)
class Bootstrap:
    """What start-up did about the first admin: made one (with a generated password?) or found accounts."""

    created: bool
    name: str
    password: str | None  # only when it was generated here and must be shown once


def outranks(role: str, needed: str) -> bool:
    return role in ROLES and ROLES.index(role) >= ROLES.index(needed)


class Accounts:
    def __init__(self, store: StaffStore, hasher: PasswordHasher | None = None) -> None:
        self.store = store
        self.hasher = hasher or PasswordHasher()
        # Verified when the name is unknown, so a wrong name costs as long as a wrong password.
        self._decoy_hash = self.hasher.hash(secrets.token_urlsafe(16))

    def bootstrap(self, name: str, password: str | None) -> Bootstrap:
        """On a fresh install (no admin account yet) create `name` as admin, with a random password if none."""
        if self.store.count_users("admin"):
            return Bootstrap(False, name, None)
        generated = None if password else secrets.token_urlsafe(16)
        try:
            self.add(name, "admin", password or generated, actor="(start-up)")
        except InputError:
            if self.store.count_users("admin"):  # a replica starting at the same moment made the first admin
                return Bootstrap(False, name, None)
            raise
        return Bootstrap(True, name, generated)

    def authenticate(self, name: str, password: str) -> StaffAccount | None:
        """The account when the password is right; hashes from older parameters are upgraded on the way."""
        user = self.store.get_user(name)
        try:
            self.hasher.verify(user.password_hash if user else self._decoy_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        if user is None:
            return None
        if self.hasher.check_needs_rehash(user.password_hash):
            self.store.update_user(name, password_hash=self.hasher.hash(password))
        return StaffAccount(user.name, user.role)

    def get(self, name: str | None) -> StaffAccount | None:
        user = self.store.get_user(name) if name else None
        return StaffAccount(user.name, user.role) if user else None

    def list(self) -> list[StaffRecord]:
        return self.store.list_users()

    # --- changes, each one audited -------------------------------------------------------------------

    def add(self, name: str, role: str, password: str, actor: str) -> None:
        """InputError for a bad name, role or password, or a name that is taken."""
        name = _check_name(name)
        _check_role(role)
        _check_password(password)
        try:
            self.store.add_user(name, role, self.hasher.hash(password))
        except ValueError as err:
            raise InputError(str(err)) from err
        self.store.record(actor, "user_add", target=f"user:{name}", details={"role": role})

    def reset_password(self, name: str, password: str, actor: str) -> None:
        _check_password(password)
        if not self.store.update_user(name, password_hash=self.hasher.hash(password)):
            raise InputError(f"no staff account named {name!r}")
        self.store.record(actor, "user_reset", target=f"user:{name}")

    def set_role(self, name: str, role: str, actor: str) -> None:
        _check_role(role)
        before = self.store.get_user(name)
        if before is None:
            raise InputError(f"no staff account named {name!r}")
        self._keep_an_admin(before, role)
        self.store.update_user(name, role=role)
        self.store.record(actor, "user_role", target=f"user:{name}", details={"before": before.role, "after": role})

    def remove(self, name: str, actor: str) -> None:
        before = self.store.get_user(name)
        if before is None:
            raise InputError(f"no staff account named {name!r}")
        self._keep_an_admin(before, None)
        self.store.remove_user(name)
        self.store.record(actor, "user_remove", target=f"user:{name}", details={"role": before.role})

    def _keep_an_admin(self, user: StaffRecord, new_role: str | None) -> None:
        """Refuse to take away the last admin: nobody could manage accounts from the web page any more."""
        if user.role == "admin" and new_role != "admin" and self.store.count_users("admin") <= 1:
            raise InputError("That is the last admin account; make another admin first.")


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_CHARS or any(ch.isspace() for ch in name):
        raise InputError(f"A user name is 1 to {NAME_CHARS} characters without spaces.")
    return name


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise InputError(f"The role must be one of {', '.join(ROLES)}.")


def _check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_CHARS:
        raise InputError(f"A password needs at least {MIN_PASSWORD_CHARS} characters.")
