"""Staff accounts on a real SQLite database: argon2 hashes, the bootstrap admin, the last admin kept."""

from pathlib import Path

import pytest
from argon2 import PasswordHasher

from cache import AuditFilter, StaffStore
from chatbot import Accounts, InputError


@pytest.fixture
def accounts(tmp_path: Path) -> Accounts:
    store = StaffStore.open(tmp_path)
    yield Accounts(store)  # the real default parameters: what the app stores
    store.close()


def test_a_stored_hash_is_argon2_never_the_password_and_verifies_with_the_library(accounts):
    accounts.add("ada", "admin", "correct horse battery", actor="test")
    stored = accounts.store.get_user("ada").password_hash
    assert stored.startswith("$argon2id$") and "correct horse battery" not in stored
    assert PasswordHasher().verify(stored, "correct horse battery")
    accounts.add("bob", "agent", "correct horse battery", actor="test")
    assert accounts.store.get_user("bob").password_hash != stored  # salted


def test_authenticate_takes_only_the_right_password_of_an_existing_user(accounts):
    accounts.add("ada", "admin", "right-password", actor="test")
    assert accounts.authenticate("ada", "right-password").role == "admin"
    for name, password in [("ada", "wrong-password"), ("ada", ""), ("Ada", "right-password"), ("eve", "x")]:
        assert accounts.authenticate(name, password) is None
    accounts.reset_password("ada", "new-password", actor="test")
    assert accounts.authenticate("ada", "right-password") is None
    assert accounts.authenticate("ada", "new-password") is not None


def test_bootstrap_makes_the_first_admin_once(accounts, tmp_path):
    first = accounts.bootstrap("admin", None)
    assert first.created and len(first.password) >= 16
    assert accounts.authenticate("admin", first.password) is not None
    again = accounts.bootstrap("admin", "another-password")
    assert not again.created and accounts.authenticate("admin", "another-password") is None
    configured = Accounts(StaffStore.open(tmp_path / "fresh"))
    made = configured.bootstrap("root", "configured-pw")
    assert made.created and made.password is None and configured.authenticate("root", "configured-pw")


def test_bad_input_and_taking_away_the_last_admin_are_refused(accounts):
    accounts.add("ada", "admin", "ada-password", actor="test")
    for name, role, password in [("", "agent", "long-enough"), ("a b", "agent", "long-enough"),
                                 ("carl", "root", "long-enough"), ("carl", "agent", "short"),
                                 ("ada", "agent", "long-enough")]:
        with pytest.raises(InputError):
            accounts.add(name, role, password, actor="test")
    with pytest.raises(InputError, match="last admin"):
        accounts.remove("ada", actor="test")
    with pytest.raises(InputError, match="last admin"):
        accounts.set_role("ada", "agent", actor="test")
    rows = accounts.store.audit(AuditFilter(actor="test"))
    assert [(r.action, r.target) for r in rows] == [("user_add", "user:ada")]
