"""Find where the end of the text so far occurs in the references (pure Python, no torch).

Every n-gram (n = 1..max_match_len) of every reference maps to the positions right after it.
References may grow (the reply so far is one): `extend` registers only the n-grams that gained
a successor, so each accepted token costs max_match_len dictionary inserts, never a rescan.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

PROMPT_SOURCE = -1  # the prompt, used as a reference of its own
OUTPUT_SOURCE = -2  # the reply so far, used as a reference of its own


@dataclass(frozen=True)
class Match:
    """The longest suffix of the query found in a reference, and where its continuation starts."""

    source: int  # index into the caller's references, or PROMPT_SOURCE / OUTPUT_SOURCE
    next_pos: int  # position in that reference of the first token to copy
    match_len: int  # the paper's n: how many trailing tokens agree


@dataclass
class _Source:
    tokens: list[int] = field(default_factory=list)
    registered: int = 0  # n-grams ending before this position have been indexed


class ReferenceIndex:
    """Maps n-grams to the reference positions that follow them, for the longest-suffix lookup."""

    def __init__(self, max_match_len: int = 12, max_positions: int = 8) -> None:
        if max_match_len < 1:
            raise ValueError("max_match_len must be at least 1")
        self.max_match_len = max_match_len
        self.max_positions = max_positions  # per n-gram; bounds memory on repetitive text
        self._sources: dict[int, _Source] = {}
        self._priority: dict[int, int] = {}  # lower is preferred when matches tie in length
        self._next: dict[tuple[int, ...], list[tuple[int, int]]] = {}

    def add(self, source: int, tokens: Sequence[int], priority: int | None = None) -> None:
        """Register a new reference (it may be empty and grow later)."""
        if source in self._sources:
            raise ValueError(f"reference {source} is already indexed")
        self._sources[source] = _Source()
        self._priority[source] = len(self._priority) if priority is None else priority
        self.extend(source, tokens)

    def extend(self, source: int, tokens: Sequence[int]) -> None:
        """Append tokens to a reference and index the n-grams that now have a successor."""
        ref = self._sources[source]
        ref.tokens.extend(int(t) for t in tokens)
        # An n-gram ending at position e is only useful once position e + 1 exists to be copied.
        for end in range(ref.registered, len(ref.tokens) - 1):
            for n in range(1, min(self.max_match_len, end + 1) + 1):
                key = tuple(ref.tokens[end - n + 1 : end + 1])
                positions = self._next.setdefault(key, [])
                if len(positions) < self.max_positions:
                    positions.append((source, end + 1))
        ref.registered = max(ref.registered, len(ref.tokens) - 1)

    def find(self, query: Sequence[int], prefer: tuple[int, int] | None = None) -> Match | None:
        """Longest suffix of `query` that occurs in a reference with at least one token after it.

        `prefer` (source, next_pos) wins a tie in length: it continues the run copied last step.
        """
        best = self._longest_indexed(query)
        if prefer is not None:
            preferred_len = self._suffix_agreement(query, *prefer)
            if preferred_len and (best is None or preferred_len >= best.match_len):
                return Match(source=prefer[0], next_pos=prefer[1], match_len=preferred_len)
        return best

    def _longest_indexed(self, query: Sequence[int]) -> Match | None:
        for n in range(min(self.max_match_len, len(query)), 0, -1):
            positions = self._next.get(tuple(query[len(query) - n :]))
            if positions:
                source, next_pos = min(positions, key=lambda p: (self._priority[p[0]], p[1]))
                return Match(source=source, next_pos=next_pos, match_len=n)
        return None

    def _suffix_agreement(self, query: Sequence[int], source: int, next_pos: int) -> int:
        """How many trailing query tokens equal the tokens just before `next_pos` (0 if nothing follows)."""
        tokens = self._sources[source].tokens if source in self._sources else []
        if not 0 < next_pos < len(tokens):
            return 0
        n = 0
        while n < min(self.max_match_len, len(query), next_pos) and query[-1 - n] == tokens[next_pos - 1 - n]:
            n += 1
        return n

    def continuation(self, match: Match, limit: int) -> list[int]:
        """Up to `limit` tokens that follow the match in its reference: the paper's copy."""
        tokens = self._sources[match.source].tokens
        return tokens[match.next_pos : match.next_pos + limit]
