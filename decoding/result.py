"""What a decode returns and hands out while streaming, and the bookkeeping both loops share."""

from collections.abc import Sequence
from dataclasses import dataclass, field


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
    copied_runs: list[CopiedRun] = field(default_factory=list)
    finished_by_eos: bool = False

    def done(self, max_new_tokens: int) -> bool:
        return self.finished_by_eos or len(self.tokens) >= max_new_tokens

    def accept(self, new_tokens: Sequence[int], max_new_tokens: int, eos_token_id: int | None) -> int:
        """Append tokens up to EOS (kept) or the budget; returns how many were kept."""
        kept = 0
        for token in new_tokens:
            if self.done(max_new_tokens):
                break
            self.tokens.append(token)
            kept += 1
            self.finished_by_eos = eos_token_id is not None and token == eos_token_id
        return kept


@dataclass(frozen=True)
class Chunk:
    """Tokens accepted by one forward pass, handed out as soon as they are verified."""

    tokens: list[int]
    copied: int  # how many of `tokens` came from a reference; the last one never does
    source: int | None  # the reference they came from, if any
    drafted: int  # tokens drafted for this pass; 0 means it was a plain one-token step
    result: DecodeResult  # running totals, the same object for every chunk of a call


def check_inputs(prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids must hold at least one token")
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must not be negative")
