"""Copy policies: given a match, how many reference tokens to draft (the paper's copy length k).

A policy is a frozen description shared by all calls; `start()` returns the per-call state.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from .cost_curve import CostCurve
from .reference_index import Match


class Drafter(Protocol):
    """One call's copy decisions: how many tokens to draft after a match, learning from what was accepted."""

    def copy_len(self, match: Match, continuing: bool, available: int) -> int: ...

    def record(self, match: Match, continuing: bool, drafted: int, accepted: int) -> None: ...


class CopyPolicy(Protocol):
    """A frozen description of a copy rule, shared by all calls; `start()` gives one call its drafter."""

    def start(self) -> Drafter: ...


@dataclass(frozen=True)
class FixedCopyPolicy:
    """The paper's rule: whenever the last n tokens match a reference, copy the next k."""

    match_len: int = 1  # n
    copy_len: int = 15  # k

    def __post_init__(self) -> None:
        if self.match_len < 1 or self.copy_len < 1:
            raise ValueError("match_len and copy_len must be at least 1")

    def start(self) -> "FixedDrafter":
        return FixedDrafter(self)


@dataclass
class FixedDrafter:
    policy: FixedCopyPolicy

    def copy_len(self, match: Match, continuing: bool, available: int) -> int:
        return min(self.policy.copy_len, available) if match.match_len >= self.policy.match_len else 0

    def record(self, match: Match, continuing: bool, drafted: int, accepted: int) -> None:
        pass


@dataclass(frozen=True)
class AdaptiveCopyPolicy:
    """Drafts only when the expected accepted tokens pay for the larger verification forward.

    Each drafted token is modelled as accepted with probability p, given the ones before it were
    (so a draft of k yields 1 + p + ... + p^k tokens). p is estimated per call from what was
    accepted so far, separately for drafts that continue the last copied run and for fresh
    matches of each match length, starting from priors that were tuned on the benchmark. A run
    that has already agreed with the model for many tokens counts as extra evidence for its next
    draft: long verbatim runs (a repeated answer) are drafted long from their second draft on.
    """

    cost: CostCurve
    min_match_len: int = 1
    max_copy_len: int = 48
    # Defaults chosen by bench/tune.py (replayed decodes priced with the measured cost curve).
    # Prior acceptance for a fresh match of length 1, 2, ... (the last value covers longer ones).
    prior_by_match_len: tuple[float, ...] = (0.35, 0.5, 0.6, 0.7, 0.8, 0.85)
    prior_continuing: float = 0.8  # the previous draft was fully accepted and this one follows it
    prior_strength: float = 8.0  # how many observed drafted tokens the prior is worth
    min_gain: float = 1.0  # draft only if expected speed beats a plain step by this factor
    run_weight: float = 1.0  # accepted tokens of the current run, as observations for its next draft

    def start(self) -> "AdaptiveDrafter":
        return AdaptiveDrafter(self)


@dataclass(frozen=True)
class SharedForwardPolicy:
    """`policy` for a reply whose forwards others may share: an adaptive one weighs drafts by `lane_seconds` (what
    a shared forward takes per reply lately, None while alone); any other drafts as it would alone."""

    policy: CopyPolicy
    lane_seconds: Callable[[], float | None]

    def start(self) -> Drafter:
        drafter = self.policy.start()
        if isinstance(drafter, AdaptiveDrafter):
            drafter.lane_seconds = self.lane_seconds
        return drafter


@dataclass
class AdaptiveDrafter:
    policy: AdaptiveCopyPolicy
    accepted: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, float] = field(default_factory=dict)
    run_len: int = 0  # tokens the current copied run has agreed with the model so far
    # Seconds a shared forward takes per reply in it lately, None while this reply is alone (Scheduler.lane_seconds).
    # Drafts change only how fast a reply comes, never its tokens, so they may depend on the company it keeps.
    lane_seconds: Callable[[], float | None] | None = None

    def copy_len(self, match: Match, continuing: bool, available: int) -> int:
        if match.match_len < self.policy.min_match_len:
            return 0
        run_evidence = self.policy.run_weight * self.run_len if continuing else 0.0
        p = self.acceptance(self._bucket(match, continuing), run_evidence)
        return best_copy_len(p, self.cost_now(), min(self.policy.max_copy_len, available), self.policy.min_gain)

    def cost_now(self) -> CostCurve:
        """The cost curve, or in company this reply's part of it (CostCurve.in_company)."""
        seconds = self.lane_seconds() if self.lane_seconds is not None else None
        if seconds is None:
            return self.policy.cost
        return self.policy.cost.in_company(seconds / self.policy.cost.cost(1))

    def record(self, match: Match, continuing: bool, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        bucket = self._bucket(match, continuing)
        self.accepted[bucket] = self.accepted.get(bucket, 0.0) + accepted
        self.rejected[bucket] = self.rejected.get(bucket, 0.0) + (1.0 if accepted < drafted else 0.0)
        # A fully accepted draft is followed by the model's own next token, which continues the run
        # only if the next draft is "continuing"; a partly accepted one ends the run.
        fully_accepted = accepted == drafted
        self.run_len = ((self.run_len if continuing else 0) + accepted + 1) if fully_accepted else 0

    def acceptance(self, bucket: str, run_evidence: float = 0.0) -> float:
        """Posterior mean of the per-token acceptance probability for this kind of match.

        `run_evidence` adds that many accepted tokens (no rejection) from the run being continued.
        """
        prior = self._prior(bucket)
        strength = self.policy.prior_strength
        good = prior * strength + self.accepted.get(bucket, 0.0) + run_evidence
        bad = (1.0 - prior) * strength + self.rejected.get(bucket, 0.0)
        return good / (good + bad)

    def _bucket(self, match: Match, continuing: bool) -> str:
        if continuing:
            return "continuing"
        return f"n={min(match.match_len, len(self.policy.prior_by_match_len))}"

    def _prior(self, bucket: str) -> float:
        if bucket == "continuing":
            return self.policy.prior_continuing
        return self.policy.prior_by_match_len[int(bucket[2:]) - 1]


def best_copy_len(p: float, cost: CostCurve, limit: int, min_gain: float = 1.0) -> int:
    """The k that maximises expected tokens per second, (1 + p + ... + p^k) / cost(k + 1); 0 if none pays."""
    best_k, best_gain = 0, min_gain
    expected_tokens, p_run = 1.0, 1.0
    for k in range(1, limit + 1):
        p_run *= p
        expected_tokens += p_run
        gain = expected_tokens / cost.relative(k + 1)
        if gain > best_gain:
            best_k, best_gain = k, gain
    return best_k
