"""The web server: one FastAPI app with the chat at / for everyone and the staff page at /admin behind a login."""

import gradio as gr
from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from gradio.utils import get_upload_folder

from chatbot import AdminService, Admission, ChatService

from . import admin_page
from .auth import LoginGuard, LoginLimits, StaffLogin
from .chat_page import ChatPage

CSS = """
mark.copied-cache { background: #fde68a; }
mark.copied-prompt { background: #bfdbfe; }
mark.copied-reply { background: #bbf7d0; }
.reply-text { white-space: pre-wrap; line-height: 1.5; }
"""
AUTH_MESSAGE = (
    "Helpdesk staff: log in with your staff account. After {failures} failed attempts for a name or from an "
    "address, logins from there pause for a while."
)


def build_app(
    chat_service: ChatService, admin_service: AdminService, examples: list[str], admission: Admission,
    login_limits: LoginLimits,
) -> FastAPI:
    """Mount the admin page first: a mount at / would otherwise take every path."""
    app = FastAPI(title="Nimbus Drive helpdesk", docs_url=None, redoc_url=None, openapi_url=None)
    app.get("/healthz", include_in_schema=False)(_healthz)
    # "/admin" without the slash would fall through to the chat app's 404 (Gradio's logout redirects there).
    app.get(admin_page.PATH, include_in_schema=False)(lambda: RedirectResponse(f"{admin_page.PATH}/"))
    common = {"ssr_mode": False, "mcp_server": False, "run_history": False, "css": CSS}
    login = StaffLogin(admin_service)
    gr.mount_gradio_app(
        app, admin_page.build_admin(admin_service, login), path=admin_page.PATH, auth=login.check,
        auth_message=AUTH_MESSAGE.format(failures=login_limits.max_failures), footer_links=["gradio"], **common,
    )
    gr.mount_gradio_app(
        app, ChatPage(chat_service, examples, admission).build(), path="/", footer_links=["api", "gradio"],
        # Admin exports and uploads sit in Gradio's shared upload folder; the chat page serves no files at all.
        blocked_paths=[str(get_upload_folder())], **common,
    )
    app.add_middleware(LoginGuard, prefix=admin_page.PATH, admin=admin_service, limits=login_limits)
    return app


def _healthz() -> dict:
    return {"status": "ok"}
