"""The admin login: configured or generated password, constant-time check, a check inside every handler."""

from types import SimpleNamespace

import gradio as gr
import pytest

from webui import AdminLogin


def test_configured_password_is_used_and_never_announced():
    login = AdminLogin.from_settings("admin", "s3cret-value")
    assert not login.generated and login.check("admin", "s3cret-value")
    assert "s3cret-value" not in login.announcement("CHATBOT_ADMIN_PASSWORD")
    assert "s3cret-value" not in repr(login)


@pytest.mark.parametrize("configured", [None, ""])
def test_missing_password_is_generated_and_announced_once(configured):
    login = AdminLogin.from_settings("admin", configured)
    assert login.generated and len(login.password) >= 16
    assert login.announcement("CHATBOT_ADMIN_PASSWORD") == f"Admin login: admin / {login.password}"
    assert AdminLogin.from_settings("admin", configured).password != login.password


@pytest.mark.parametrize("user, password", [("admin", "wrong"), ("Admin", "pw"), ("", ""), ("admin", "pw ")])
def test_check_refuses_anything_but_the_exact_login(user, password):
    assert not AdminLogin("admin", "pw").check(user, password)


@pytest.mark.parametrize("request_", [None, SimpleNamespace(username=None), SimpleNamespace(username="mallory")])
def test_require_refuses_requests_without_the_admin_login(request_):
    with pytest.raises(gr.Error):
        AdminLogin("admin", "pw").require(request_)


def test_require_lets_the_admin_through():
    AdminLogin("admin", "pw").require(SimpleNamespace(username="admin"))
