"""What a reply cost and where its tokens came from, computed from one decode: stats, speedup estimate, spans."""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from decoding import OUTPUT_SOURCE, PROMPT_SOURCE, CopiedRun, CostCurve, DecodeResult, Engine, RepetitionRule, Sharing

from .replies import Span
from .stats import ArticleUse, ReferenceUse, ReplyStats
from .turn import ChatTurn


@dataclass
class StepTimer:
    """Times the steps that drafted nothing: greedy's own step time, measured inside this very decode."""

    plain_steps: list[float] = field(default_factory=list)
    last: float = field(default_factory=time.perf_counter)

    def lap(self, drafted: int, tokens_so_far: int) -> None:
        now = time.perf_counter()
        if drafted == 0 and tokens_so_far > 1:  # the first token's time is the prefill's
            self.plain_steps.append(now - self.last)
        self.last = now

    def step_seconds(self, cost: CostCurve) -> tuple[float, str]:
        """Greedy's step time (one token, or W wide) and how it was found."""
        if len(self.plain_steps) >= 3:
            steps = self.plain_steps
            return statistics.median(steps), f"median of {len(steps)} plain steps in this decode"
        return cost.cost(1), "greedy step calibrated at start-up"


@dataclass(frozen=True)
class ReplyMeter:
    """Builds a reply's stats; what it needs beyond the decode is fixed for the service's life."""

    engine: Engine
    cost: CostCurve
    repetition: RepetitionRule
    max_new_tokens: int

    def stats(
        self, turn: ChatTurn, result: DecodeResult, timer: StepTimer, exact_hit: bool, sharing: Sharing | None = None
    ) -> ReplyStats:
        n = len(result.tokens)
        step, method = timer.step_seconds(self.cost)
        if exact_hit:  # drafted whole and verified: one forward, or one W-wide forward per W tokens
            after = max(result.forward_passes - 1, 1)
            forwards = f"{after} forward{'s' if after > 1 else ''}"
            method = f"exact repeat drafted whole, {forwards} after the prefill; {method}"
        greedy_estimate = result.prefill_seconds + max(n - 1, 0) * step
        seconds = max(result.seconds, 1e-6)
        copied = copied_by_source(turn, result)
        return ReplyStats(
            tokens=n, forward_passes=result.forward_passes, copied_tokens=result.copied_tokens,
            seconds=round(result.seconds, 4), tokens_per_second=round(n / seconds, 1),
            greedy_seconds_estimate=round(greedy_estimate, 4), speedup=round(greedy_estimate / seconds, 2),
            speedup_method=f"estimate: measured prefill + {max(n - 1, 0)} greedy steps x "
            f"{step * 1000:.0f} ms ({method})",
            exact_hit=exact_hit, copied_share=round(result.copied_tokens / n, 3) if n else 0.0,
            tokens_per_forward_pass=round(n / result.forward_passes, 2) if result.forward_passes else None,
            references=reference_uses(turn, copied),
            grounding=reference_uses(turn, copied, only={hit.id for hit in turn.grounding}),
            copied_from_prompt=copied.get(PROMPT_SOURCE, 0), copied_from_reply=copied.get(OUTPUT_SOURCE, 0),
            article=ArticleUse(turn.article.id, round(turn.article.score, 3)) if turn.article else None,
            history_trimmed=turn.prompt.dropped_turns,
            finished=result.stop_reason is not None, stop_reason=result.stop_reason or "",
            repetition=self.repetition.to_json(), max_new_tokens=self.max_new_tokens,
            step_width=turn.steps.width, cache_len=turn.steps.cache_len if turn.steps.width else None,
            padded_steps=turn.steps.padded,
            forward=self.engine.forward, weights=self.engine.weights, prefill_weights=self.engine.prefill_weights,
            attention=self.engine.attention, prefill_attention=self.engine.prefill_attention,
            lane_head=self.engine.lane_head,
            shared_with=round(sharing.mean_others, 2) if sharing else 0.0,
            prefill_chunk=turn.steps.prefill_chunk or 0, prefill_break=turn.steps.prefill_break,
            prompt_tokens=len(turn.prompt.ids),
            prompt_reused=result.prompt_reused,
        )


def copied_by_source(turn: ChatTurn, result: DecodeResult) -> dict[int, int]:
    """Tokens copied from each reference index (and PROMPT_SOURCE, OUTPUT_SOURCE), runs from an approved answer's
    place in the prompt credited to that answer."""
    copied: dict[int, int] = {}
    for run in result.copied_runs:
        source = credited_source(run, turn.grounding_places)
        copied[source] = copied.get(source, 0) + run.length
    return copied


def credited_source(run: CopiedRun, places: dict[int, list[range]]) -> int:
    """The reference a run is credited to: a prompt run inside a grounding answer's place (ChatTurn.
    grounding_places) is that answer's. LLMA finds a draft in the prompt and in the references alike, so a run
    copied from the prompt may be the approved answer's text: the reply line then says so (under the "answer"
    layout most of a grounded reply is drafted from there)."""
    if run.source == PROMPT_SOURCE:
        for index, ranges in places.items():
            if any(run.ref_start in place and run.ref_start + run.length - 1 in place for place in ranges):
                return index
    return run.source


def used_entries(turn: ChatTurn, result: DecodeResult) -> set[int]:
    """The cache entries the reply copied from, an approved answer's place in the prompt included."""
    return {turn.reference_id(credited_source(run, turn.grounding_places)) for run in result.copied_runs} - {None}


def reference_uses(turn: ChatTurn, copied: dict[int, int], only: set[int] | None = None) -> tuple[ReferenceUse, ...]:
    """How much came from each reference (those whose entry id is in `only`, when given), in reference order."""
    return tuple(
        ReferenceUse(hit.id, round(hit.score, 3), copied.get(i, 0))
        for i, hit in enumerate(turn.references) if only is None or hit.id in only
    )


def copied_spans(turn: ChatTurn, result: DecodeResult, text_of: Callable[[list[int]], str]) -> list[Span]:
    """The reply's characters that were copied, each labelled with where they came from."""
    spans = []
    for run in result.copied_runs:
        start = len(text_of(result.tokens[: run.out_start]))
        end = len(text_of(result.tokens[: run.out_start + run.length]))
        source = credited_source(run, turn.grounding_places)
        entry = turn.reference_id(source)
        label = f"cache:{entry}" if entry is not None else ("reply" if source == OUTPUT_SOURCE else "prompt")
        if end > start:
            spans.append(Span(start, end, label))
    return spans
