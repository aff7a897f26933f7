"""Question normalization shared by exact lookups and the dashboard."""

import re

_TRAILING_PUNCTUATION = ".,;:!?…。？！，；：" + " "


def normalize_question(text: str) -> str:
    """Casefold, collapse whitespace and strip trailing punctuation, so trivial variants match exactly."""
    collapsed = re.sub(r"\s+", " ", text.casefold()).strip()
    return collapsed.rstrip(_TRAILING_PUNCTUATION)
