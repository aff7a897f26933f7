"""The chat service: one chat turn on top of the decoding engine and the answer cache."""

from .prompt import InputError
from .service import ChatService, ChatSettings, Reply, Span, Verification

__all__ = ["ChatService", "ChatSettings", "InputError", "Reply", "Span", "Verification"]
