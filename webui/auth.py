"""The admin login: the configured credentials, or a random password made once at start."""

import hmac
import secrets
from dataclasses import dataclass, field

import gradio as gr

# For events that are UI plumbing: hidden from the API page and refused to gradio clients.
PRIVATE = {"api_visibility": "private"}


@dataclass(frozen=True)
class AdminLogin:
    user: str
    password: str = field(repr=False)
    generated: bool = False  # True when no password was configured and this one was made up at start

    @classmethod
    def from_settings(cls, user: str, password: str | None) -> "AdminLogin":
        """The configured password, or (when none or an empty one is set) a random one."""
        if password:
            return cls(user, password)
        return cls(user, secrets.token_urlsafe(16), generated=True)

    def check(self, user: str, password: str) -> bool:
        """Gradio's login callback; compares in constant time."""
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        return hmac.compare_digest(password.encode(), self.password.encode()) and user_ok

    def require(self, request: gr.Request | None) -> None:
        """Refuse an admin action unless its request carries the admin's login (checked on every action)."""
        if request is None or request.username != self.user:
            raise gr.Error("Please log in as the admin.")

    def announcement(self, env_var: str) -> str:
        """The one line printed at start; shows the password only when it was generated."""
        password = self.password if self.generated else f"(the password set in {env_var})"
        return f"Admin login: {self.user} / {password}"
