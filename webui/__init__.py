"""The web UI: a public chat page and a login-protected admin page, both Gradio apps in one FastAPI app."""

from .auth import AdminLogin
from .server import build_app

__all__ = ["AdminLogin", "build_app"]
