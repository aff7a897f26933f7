"""What a decode returns and hands out while streaming, and the bookkeeping both loops share."""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .repetition import REPETITION_OFF, RepetitionRule

STOP_REASONS = ("eos", "limit", "repetition")  # why a reply ended: EOS (kept), max_new_tokens, the stop rule


@dataclass(frozen=True)
class CopiedRun:
    """Consecutive reply tokens taken from one place of one reference."""

    source: int  # index into `references`, or PROMPT_SOURCE / OUTPUT_SOURCE
    ref_start: int  # position in that reference of the first copied token
    out_start: int  # position in the reply of the first copied token
    length: int


@dataclass
class DecodeResult:
    """Reply tokens and what it took to produce them; filled in place while streaming."""

    tokens: list[int] = field(default_factory=list)
    forward_passes: int = 0
    copied_tokens: int = 0
    drafted_tokens: int = 0
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    prompt_reused: int = 0  # prompt tokens taken from the prefix cache, not computed (decoding/prefix_cache.py)
    copied_runs: list[CopiedRun] = field(default_factory=list)
    stop_reason: str | None = None  # one of STOP_REASONS once the reply ended
    repeat_start: int | None = None  # under the stop rule: where the repetition began, i.e. where the reply is cut
    dropped_tokens: int = 0  # tokens cut off the end by the stop rule

    @property
    def finished_by_eos(self) -> bool:
        return self.stop_reason == "eos"

    def done(self) -> bool:
        return self.stop_reason is not None

    def accept(
        self, new_tokens: Sequence[int], max_new_tokens: int, eos_token_id: int | None,
        repetition: RepetitionRule = REPETITION_OFF,
    ) -> int:
        """Append tokens one by one until EOS (kept), the stop rule or the budget ends the reply; returns how
        many were appended. Per token, so a draft accepted whole ends where one-token steps would."""
        kept = 0
        for token in new_tokens:
            if self.done():
                break
            self.tokens.append(token)
            kept += 1
            if eos_token_id is not None and token == eos_token_id:
                self.stop_reason = "eos"
            elif repetition.stops(self.tokens):
                self.stop_reason, self.repeat_start = "repetition", len(self.tokens) - repetition.stop_ngram
            elif len(self.tokens) >= max_new_tokens:
                self.stop_reason = "limit"
        return kept

    def drop_repeat(self) -> int:
        """Cut the reply where the repetition the stop rule saw began (copied runs clipped); returns how many
        tokens went. Called once the chunk's bookkeeping is done; does nothing unless the stop rule fired."""
        if self.repeat_start is None or self.dropped_tokens:
            return 0
        self.dropped_tokens = len(self.tokens) - self.repeat_start
        del self.tokens[self.repeat_start :]
        runs = [replace(r, length=min(r.length, self.repeat_start - r.out_start)) for r in self.copied_runs]
        self.copied_runs = [run for run in runs if run.length > 0]
        self.copied_tokens = sum(run.length for run in self.copied_runs)
        return self.dropped_tokens


@dataclass(frozen=True)
class Chunk:
    """Tokens accepted by one forward pass, handed out as soon as they are verified."""

    tokens: list[int]
    copied: int  # how many of `tokens` came from a reference; the last one never does
    source: int | None  # the reference they came from, if any
    drafted: int  # tokens drafted for this pass; 0 means it was a plain one-token step
    result: DecodeResult  # running totals, the same object for every chunk of a call
    dropped: int = 0  # then this many tokens were cut off the reply's end (the stop rule): result.tokens is the reply


def check_inputs(prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids must hold at least one token")
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must not be negative")
