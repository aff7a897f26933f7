"""Find where the end of the text so far occurs in the references (no torch; numpy for the scan).

A lookup scans each reference for the positions of the query's last token and extends those matches backwards
(a few array operations per reference), so adding a reference costs nothing. The n-gram dictionary this
replaced inserted every n-gram of every reference (n = 1..max_match_len) before the first token could be
chosen: some 13,000 inserts for a 700-token prompt and its references, 65 ms on the reply's critical path
(AMD EPYC), against some 0.1 ms a lookup now and a few dozen lookups a reply.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

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
    priority: int = 0  # lower is preferred when matches tie in length
    _array: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def array(self) -> np.ndarray:
        """The tokens as an array, made again only after the reference grew (the reply so far grows a chunk a step)."""
        if len(self._array) != len(self.tokens):
            self._array = np.asarray(self.tokens, dtype=np.int64)
        return self._array


class ReferenceIndex:
    """The references, searched for the longest suffix of the text so far that some token follows."""

    def __init__(self, max_match_len: int = 12) -> None:
        if max_match_len < 1:
            raise ValueError("max_match_len must be at least 1")
        self.max_match_len = max_match_len
        self._sources: dict[int, _Source] = {}

    def add(self, source: int, tokens: Sequence[int], priority: int | None = None) -> None:
        """Register a new reference (it may be empty and grow later)."""
        if source in self._sources:
            raise ValueError(f"reference {source} is already indexed")
        self._sources[source] = _Source(priority=len(self._sources) if priority is None else priority)
        self.extend(source, tokens)

    def extend(self, source: int, tokens: Sequence[int]) -> None:
        """Append tokens to a reference (the reply so far, as it grows)."""
        self._sources[source].tokens.extend(int(t) for t in tokens)

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
        """The longest suffix (at most max_match_len) with a token after it; a tie goes to the preferred
        reference (the caller's order: earlier references, then the prompt, then the reply), then the earliest
        position."""
        limit = min(self.max_match_len, len(query))
        if limit == 0:
            return None
        wanted = np.asarray(query[len(query) - limit :][::-1], dtype=np.int64)  # wanted[j]: the j-th token back
        best: Match | None = None
        for source, ref in sorted(self._sources.items(), key=lambda item: item[1].priority):
            tokens = ref.array()
            # Ends of a match: the last token occurs there and a token follows it to be copied.
            ends = np.flatnonzero(tokens[:-1] == wanted[0])
            if ends.size == 0:
                continue
            lengths = np.ones(ends.size, dtype=np.int64)
            alive = np.ones(ends.size, dtype=bool)
            for back in range(1, limit):
                at = ends - back
                alive &= at >= 0
                alive[alive] = tokens[at[alive]] == wanted[back]
                if not alive.any():
                    break
                lengths += alive
            first_longest = int(np.argmax(lengths))  # the earliest of the longest
            n = int(lengths[first_longest])
            if best is None or n > best.match_len:
                best = Match(source=source, next_pos=int(ends[first_longest]) + 1, match_len=n)
                if n == limit:  # nothing later can be longer, and ties go to this one
                    break
        return best

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
