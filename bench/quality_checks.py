"""What a customer would notice in a reply, counted: loops, how it ended, and facts its prompt does not hold.

Pure text functions, so the benchmark's quality table and its tests share one definition.
"""

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

LOOP_NGRAM = 12  # a run of this many tokens twice in one reply is a loop
LOOP_LINE_TIMES = 3  # so is one line or sentence three times
# Facts a reply can state wrongly: e-mail addresses, URLs and domains, prices, and other numbers.
EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
URL = r"(?:https?://|www\.)[^\s)\]]+|\b[\w-]+(?:\.[\w-]+)*\.(?:com|net|org|io|app|help)\b(?:/[^\s)\]]*)?"
PRICE = r"[$€£]\s?\d+(?:[.,]\d+)*"
NUMBER = r"\b\d+(?:[.,:]\d+)*\b"
FACT = re.compile("|".join(f"(?:{p})" for p in (EMAIL, URL, PRICE, NUMBER)), re.IGNORECASE)
LIST_MARKER = re.compile(r"^\s*(?:step\s+)?\d+[.):]\s", re.IGNORECASE | re.MULTILINE)  # "1. ", "Step 2: "


@dataclass(frozen=True)
class ReplyQuality:
    loops: bool
    ended: str  # "eos", "repetition" or "limit"
    tokens: int
    facts: int  # numbers, prices, URLs and e-mail addresses in the reply (list markers aside)
    unsupported: tuple[str, ...]  # those of them that appear nowhere in the prompt


def judge(reply_text: str, reply_ids: Sequence[int], prompt_text: str, ended: str) -> ReplyQuality:
    facts = facts_in(reply_text)
    return ReplyQuality(
        loops=loops(reply_text, reply_ids), ended=ended, tokens=len(reply_ids), facts=len(facts),
        unsupported=tuple(fact for fact in facts if not supported(fact, prompt_text)),
    )


def loops(text: str, ids: Sequence[int]) -> bool:
    """A repeated LOOP_NGRAM-token run, or a line or sentence LOOP_LINE_TIMES times."""
    grams = Counter(tuple(ids[i : i + LOOP_NGRAM]) for i in range(len(ids) - LOOP_NGRAM + 1))
    if any(count > 1 for count in grams.values()):
        return True
    pieces = [normalize(p) for p in re.split(r"\n+|(?<=[.!?])\s+", text)]
    counts = Counter(p for p in pieces if len(p.split()) >= 2)  # "1." or "Yes." alone is no loop
    return any(count >= LOOP_LINE_TIMES for count in counts.values())


def facts_in(text: str) -> list[str]:
    """The facts a reply states, in order; a numbered list's markers are not facts."""
    return [match.group(0).rstrip(".,") for match in FACT.finditer(LIST_MARKER.sub(" ", text))]


def supported(fact: str, prompt_text: str) -> bool:
    """The fact appears in the prompt (case and spacing aside; "$8" also as "8 dollars" is not tried)."""
    return normalize(fact).replace(" ", "") in normalize(prompt_text).replace(" ", "")


def normalize(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .!?")
