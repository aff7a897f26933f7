"""What a run's records add up to: the result rows, the grounded and peer summaries, and the figures the report
uses to explain a missed target. Everything here is computed from bench/results.py's records; nothing is typed in.
"""

import statistics
from dataclasses import dataclass

from bench.methods import LLMA_METHODS
from bench.results import GridCell, MethodRun, QuestionRecord, Results, Row, cpu_speedup, speedup


@dataclass(frozen=True)
class GroundedSummary:
    """LLMA on a grounded workload: against greedy on the same prompt and against the plain prompt's greedy."""

    workload: str
    questions: int
    grounded: int  # questions whose prompt got an approved answer; the others ran on the plain prompt
    greedy_tokens_per_s: float | None
    speedup: float | None  # sum of greedy seconds / sum of LLMA seconds, the same prompt
    end_to_end_speedup: float | None  # sum of the plain prompt's greedy seconds / sum of LLMA seconds
    copied_from_approved: float | None  # mean share of a grounded reply copied from its approved answer
    worst_question: str | None  # the least end-to-end speedup
    worst_end_to_end: float | None
    mismatches: int  # LLMA runs (any LLMA method) whose tokens differ from greedy's


@dataclass(frozen=True)
class PeerSummary:
    """Another engine's greedy (--peers) next to this engine's greedy and hf_greedy on the same questions.

    Tokens per second, not speedups: a peer's reply may be longer or shorter than greedy's.
    """

    workload: str  # or "all"
    method: str
    questions: int
    tokens_per_s: float | None
    greedy_tokens_per_s: float | None
    hf_greedy_tokens_per_s: float | None  # None when hf_greedy did not run on every one of these questions
    same_reply_share: float | None  # replies token for token equal to greedy's; a difference is no LLMA mismatch


@dataclass(frozen=True)
class OwnAnswerSplit:
    """A method's speedup on questions with and without their group's own cached answer among the references."""

    with_own: float
    with_own_questions: int
    without: float
    without_questions: int


@dataclass(frozen=True)
class StepFlatness:
    """One W-row packed forward against a one-row one, both measured at the start of the run."""

    width: int
    width_ms: float
    one_row_ms: float

    @property
    def ratio(self) -> float:
        return self.width_ms / self.one_row_ms

    @property
    def per_extra_row_ms(self) -> float:
        return (self.width_ms - self.one_row_ms) / (self.width - 1)


# --- rows and grid cells ------------------------------------------------------------------------


def summarize(workload: str, method: str, records: list[QuestionRecord]) -> Row:
    """One method on one workload, summed over the questions it ran on."""
    measured = [q for q in records if q.run(method)]
    if not measured:
        return Row(workload, method, 0, 0, 0.0, None, None, None, None, None, None, None, None, None)
    runs = [q.run(method) for q in measured]
    greedy = [q.run("greedy") for q in measured]
    hf_greedy = [q.run("hf_greedy") for q in measured if q.run("hf_greedy")]
    seconds = sum(r.seconds for r in runs)
    tokens = sum(r.tokens for r in runs)
    passes = sum(r.forward_passes for r in runs)
    per_question = [q.speedup(method) for q in measured]
    return Row(
        workload=workload,
        method=method,
        questions=len(runs),
        tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds else None,
        speedup_vs_greedy=speedup(greedy, runs),
        speedup_vs_hf_greedy=speedup(hf_greedy, runs) if len(hf_greedy) == len(runs) else None,
        cpu_speedup_vs_greedy=cpu_speedup(greedy, runs),
        tokens_per_pass=tokens / passes if passes else None,
        identical_share=sum(r.identical for r in runs) / len(runs),
        worst_speedup=min(per_question),
        median_speedup=statistics.median(per_question),
        mean_copied_share=statistics.mean(r.copied_tokens / r.tokens if r.tokens else 0.0 for r in runs),
        mismatches=[q.question for q, r in zip(measured, runs, strict=True) if not r.identical],
    )


def grid_cell(n: int, k: int, greedy: list[MethodRun], runs: list[MethodRun]) -> GridCell:
    """FixedCopyPolicy(n, k) summed over the grid's questions."""
    if not runs:
        return GridCell(n, k, None, None, None, None)
    passes = sum(r.forward_passes for r in runs)
    tokens = sum(r.tokens for r in runs)
    identical = sum(r.identical for r in runs) / len(runs)
    return GridCell(n, k, speedup(greedy, runs), cpu_speedup(greedy, runs), tokens / passes if passes else None,
                    identical)


def tokens_per_s(runs: list[MethodRun]) -> float | None:
    seconds = sum(r.seconds for r in runs)
    return sum(r.tokens for r in runs) / seconds if seconds else None


# --- grounded and peer summaries ----------------------------------------------------------------


def summarize_grounded(workload: str, records: list[QuestionRecord], method: str = "llma") -> GroundedSummary:
    """`method` (LLMA) on a grounded workload's questions; speedups are sums of seconds, like the rows'."""
    measured = [q for q in records if q.run(method)]
    greedy = [q.run("greedy") for q in records]
    shares = [share for q in measured if (share := q.copied_from_approved_share(method)) is not None]
    worst = min(measured, key=lambda q: q.end_to_end_speedup(method), default=None)
    runs = [q.run(method) for q in measured]
    return GroundedSummary(
        workload=workload,
        questions=len(records),
        grounded=sum(q.is_grounded() for q in records),
        greedy_tokens_per_s=tokens_per_s(greedy),
        speedup=speedup([q.run("greedy") for q in measured], runs) if measured else None,
        end_to_end_speedup=speedup([q.plain_greedy() for q in measured], runs) if measured else None,
        copied_from_approved=statistics.mean(shares) if shares else None,
        worst_question=worst.question if worst else None,
        worst_end_to_end=worst.end_to_end_speedup(method) if worst else None,
        mismatches=sum(not r.identical for q in records for r in q.runs if r.method in LLMA_METHODS),
    )


def grounded_summaries(results: Results) -> list[GroundedSummary]:
    """One summary per grounded workload the run measured (none for runs from before grounding)."""
    return [summarize_grounded(w, results.questions_of(w)) for w in results.grounded_workloads()]


def summarize_peer(workload: str, method: str, records: list[QuestionRecord]) -> PeerSummary:
    """A peer method's tokens/s against greedy's and hf_greedy's, each summed over the questions the peer ran."""
    measured = [q for q in records if q.run(method)]
    runs = [q.run(method) for q in measured]
    hf_greedy = [q.run("hf_greedy") for q in measured if q.run("hf_greedy")]
    return PeerSummary(
        workload=workload,
        method=method,
        questions=len(runs),
        tokens_per_s=tokens_per_s(runs),
        greedy_tokens_per_s=tokens_per_s([q.run("greedy") for q in measured]),
        hf_greedy_tokens_per_s=tokens_per_s(hf_greedy) if len(hf_greedy) == len(runs) else None,
        same_reply_share=sum(r.identical for r in runs) / len(runs) if runs else None,
    )


def peer_summaries(results: Results) -> list[PeerSummary]:
    """Per workload and over all questions, each peer against greedy and hf_greedy; none without --peers."""
    return [
        summarize_peer(workload, method, results.questions if workload == "all" else results.questions_of(workload))
        for method in results.peer_methods()
        for workload in [*results.workloads, "all"]
    ]


# --- the figures that explain a missed target ---------------------------------------------------


def pass_cost(row: Row) -> float:
    """The mean cost of one forward pass in one-token steps: a pass yielding t tokens at speedup s costs t / s."""
    return row.tokens_per_pass / row.speedup_vs_greedy


def questions_speedup(questions: list[QuestionRecord], method: str) -> float:
    return speedup([q.run("greedy") for q in questions], [q.run(method) for q in questions])


def own_answer_split(results: Results, workload: str, method: str = "llma") -> OwnAnswerSplit | None:
    """`method`'s speedup with and without the group's own cached answer; None unless the workload has both."""
    questions = results.questions_of(workload)
    own = [q for q in questions if q.has_own_answer()]
    others = [q for q in questions if not q.has_own_answer()]
    if not own or not others:
        return None
    return OwnAnswerSplit(questions_speedup(own, method), len(own), questions_speedup(others, method), len(others))


def slowest_question(results: Results, workload: str, method: str) -> QuestionRecord:
    return min(results.questions_of(workload), key=lambda q: q.speedup(method) or float("inf"))


def break_even_draft(relative_cost: float) -> float:
    """Draft tokens a forward costing `relative_cost` one-token steps must have accepted to beat greedy.

    Such a pass yields the accepted tokens plus one of the model's own, where greedy pays one step per token.
    """
    return relative_cost - 1


def step_flatness(results: Results) -> StepFlatness | None:
    """The engine's W-row packed forward against a one-row one; None unless the run measured both."""
    width = results.model.step_width
    rows = next((c for c in results.step_costs if "one forward of n rows" in c.label), None)
    if rows is None or not width or width == 1 or width not in rows.sizes or 1 not in rows.sizes:
        return None
    ms = dict(zip(rows.sizes, rows.ms, strict=True))
    return StepFlatness(width, ms[width], ms[1])
