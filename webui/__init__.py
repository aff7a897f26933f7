"""The web UI: a public chat page and a login-protected staff page, both Gradio apps in one FastAPI app."""

from .auth import LoginLimits, StaffLogin
from .server import build_app

__all__ = ["LoginLimits", "StaffLogin", "build_app"]
