"""Continuous batching: one thread owns the packed model and runs one shared forward per round for every reply
waiting on it, so concurrent replies cost about one forward of their stacked rows instead of one forward each.

Each reply keeps its own algorithm in its own thread (`llma_steps` over a `ModelVerifier`); only its runner is
different: a `ScheduledRunner` hands each W-wide block to the scheduler and waits for its logits. A round starts
once every reply holding a slot has handed in its block, or `gather_s` after the first did and the model was
free (a reply busy elsewhere, e.g. streaming to a slow browser, joins the next round). New replies' prefills run
alone, a chunk between two rounds (StepConfig.prefill_chunk), oldest first: a newcomer's long prompt slows the
others' streams down while it lasts, never stops them. A row's logits do not depend on the other rows
(decoding/batch_probe.py measures it; where it does not hold, `Scheduler.checked` lets one reply into a forward
at a time), so every reply is bit-identical to the same reply decoded alone. Where short blocks run unpadded
alone but rows of short blocks change bits in company (dense bf16 on the Xeon with AMX), the scheduler pads each
block to W before stacking: a row's bits equal in a padded block and a short one alone (both measured at start),
so sharing stays lossless.

Idle time warms the prefix cache: `warm` queues prompt beginnings (the help articles, say) whose chunks are
prefilled only while no reply holds a slot or waits for a prefill, so that later prompts beginning alike take
them from the cache (decoding/prefix_cache.py: the same bits either way).
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from .batch_probe import rows_keep_their_bits
from .hardware import synchronize
from .llma import LlmaOptions, llma_steps
from .packed import Lane, PackedLlama
from .policy import CopyPolicy, SharedForwardPolicy
from .result import Chunk, DecodeResult, check_inputs
from .runners import PackedRunner
from .steps import StepConfig
from .threads import computes_on_several_cores, one_core_here, stops_computing
from .verifier import ModelVerifier

logger = logging.getLogger(__name__)

DEFAULT_MAX_SLOTS = 8
DEFAULT_GATHER_S = 0.01  # about what a reply's own bookkeeping between two forwards takes, several times over


@dataclass
class Sharing:
    """How many other replies shared one reply's decode forwards (its prefill runs alone)."""

    forwards: int = 0  # decode forwards this reply took part in
    others: int = 0  # other replies in those forwards, summed

    @property
    def mean_others(self) -> float:
        return self.others / self.forwards if self.forwards else 0.0


@dataclass
class _StepJob:
    lane: Lane
    sharing: Sharing
    rows: int  # the reply's own rows; any past them are padding
    logits: Future = field(default_factory=Future)


@dataclass
class _PrefillJob:
    chunks: Iterator[torch.Tensor | None]  # PackedRunner.prefill_steps: None per chunk, then the logits
    logits: Future = field(default_factory=Future)

    def run_chunk(self) -> bool:
        """Run the next chunk; True once the prefill is over (its logits or its error handed over)."""
        try:
            logits = next(self.chunks)
        except Exception as error:  # handed to the reply's own thread, which raises it there
            self.logits.set_exception(error)
            return True
        if logits is None:
            return False
        self.logits.set_result(logits)
        return True


@dataclass
class _WarmJob:
    """A prompt beginning to prefill into the model's prefix cache when the model has nothing else to do."""

    ids: list[int]
    steps: StepConfig
    chunks: Iterator[torch.Tensor | None] | None = None  # its prefill, started once the model is first idle

    def run_chunk(self, model: PackedLlama) -> bool:
        """Prefill the next chunk; True once the beginning is in the cache (or could not be: it is only a warm-up)."""
        if self.chunks is None:
            self.chunks = PackedRunner(model, self.steps).prefill_steps(self.ids, counted=False)
        try:
            return next(self.chunks) is not None
        except Exception as error:  # a warm-up only: the prompt fails again, with its message, when a customer asks
            logger.warning("prompt warm-up skipped a beginning of %d tokens: %s", len(self.ids), error)
            return True


def _warm_job(ids: list[int], steps: Callable[[int], StepConfig]) -> _WarmJob | None:
    """The prefill that puts a prompt beginning's kept chunks into the prefix cache; None when none would be."""
    config = steps(len(ids))
    if config.prefill_chunk is None or not ids:
        return None
    if config.prefill_break == len(ids):  # every chunk is kept, the last one ending at the break
        return _WarmJob(ids, config)
    whole = len(ids) - len(ids) % config.prefill_chunk  # else only full chunks are kept
    # One token past them, so that the last full chunk is taken from the cache when already there, not computed
    # again for its logits (PackedRunner.prefill_steps).
    end = min(len(ids), whole + 1)
    return _WarmJob(ids[:end], steps(end)) if whole else None


class Scheduler:
    """Owns `model`: runs prefills between rounds and each round's blocks, at most `max_slots` replies, in one forward.

    `max_slots` replies decode at once (each holds a preallocated KV cache); more wait for a slot, in order.
    """

    def __init__(self, model: PackedLlama, max_slots: int = DEFAULT_MAX_SLOTS, gather_s: float = DEFAULT_GATHER_S,
                 pad_to: int | None = None):
        if max_slots < 1:
            raise ValueError("max_slots must be at least 1")
        self.model, self.max_slots, self.gather_s = model, max_slots, gather_s
        self.pad_to = pad_to  # shorter blocks are padded to this many rows for the shared forward; None: as they are
        self._changed = threading.Condition()
        self._holders = 0  # replies holding a slot
        self._next_ticket = self._serving = 0  # slots are handed out in arrival order
        self._prefills: list[_PrefillJob] = []
        self._warm: list[_WarmJob] = []
        self._steps: list[_StepJob] = []
        self._first_step_at = 0.0
        self._lane_seconds: float | None = None  # a shared forward's seconds per reply, averaged over the last few
        self._free_since = 0.0  # when the model last finished work: the replies it served submit again from then
        self._closed = False
        # The thread computes on as many cores as its creator; it takes them before the constructor returns, so
        # an entry point may then put every later thread on one (decoding/threads.py).
        self._threads, started = torch.get_num_threads(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="decode-scheduler", daemon=True)
        self._thread.start()
        started.wait()

    @classmethod
    def checked(cls, model: PackedLlama, width: int, max_slots: int = DEFAULT_MAX_SLOTS,
                gather_s: float = DEFAULT_GATHER_S, short_lanes: bool = False) -> "Scheduler":
        """A scheduler sharing forwards only where this machine's kernels keep a row's bits whatever shares it
        (`short_lanes`: replies' blocks of 1..W rows, as unpadded steps hand in). Short blocks whose rows change
        bits in company are padded to `width` when that keeps them; else one reply per forward."""
        if max_slots == 1:
            return cls(model, 1, gather_s)
        if rows_keep_their_bits(model, width, max_slots, short_lanes):
            return cls(model, max_slots, gather_s)
        if short_lanes and rows_keep_their_bits(model, width, max_slots):
            return cls(model, max_slots, gather_s, pad_to=width)
        return cls(model, 1, gather_s)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()

    def warm(self, beginnings: Sequence[Sequence[int]], steps: Callable[[int], StepConfig]) -> None:
        """Prefill each prompt beginning's kept chunks into the prefix cache while the model is idle; `steps` gives
        the step shape for a prompt of that many tokens (the chunking that real prompts get)."""
        with self._changed:
            for ids in beginnings:
                job = _warm_job(list(ids), steps)
                if job is not None:
                    self._warm.append(job)
            self._changed.notify_all()

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Wait until every queued beginning is in the prefix cache; False if `timeout` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._warm or self._closed, timeout)

    # --- what a reply's thread calls ---------------------------------------------------------------

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the `max_slots` places in the shared forwards for one reply, waiting in order for it."""
        with self._changed:
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            self._changed.wait_for(lambda: ticket == self._serving and self._holders < self.max_slots)
            self._holders += 1
            self._serving += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._holders -= 1
                self._changed.notify_all()

    def lane_seconds(self) -> float | None:
        """What a shared forward has lately taken per reply in it, while other replies hold slots too; None while a
        reply is alone (a copy policy then prices drafts by its own cost curve)."""
        return self._lane_seconds if self._holders > 1 else None

    def prefill(self, chunks: Iterator[torch.Tensor | None]) -> torch.Tensor:
        """Run a reply's prefill on the scheduler's thread, alone, a chunk between two rounds; its logits (V,)."""
        job = _PrefillJob(chunks)
        with self._changed:
            self._prefills.append(job)
            self._changed.notify_all()
        return job.logits.result()

    def step(self, lane: Lane, sharing: Sharing) -> torch.Tensor:
        """Logits of `lane`'s rows from the next shared forward."""
        rows = lane.ids.shape[0]
        if self.pad_to is not None and rows < self.pad_to:  # as StepConfig.pad: the last input repeated
            lane = replace(lane, ids=torch.cat([lane.ids, lane.ids[-1:].expand(self.pad_to - rows)]))
        job = _StepJob(lane, sharing, rows)
        with self._changed:
            if not self._steps:
                self._first_step_at = time.monotonic()
            self._steps.append(job)
            self._changed.notify_all()
        return job.logits.result()

    # --- the scheduler's thread --------------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        # This thread's own OpenMP team (decoding/threads.py). torch sizes a thread's team from its default at the
        # thread's first call, and would undo the size set here then: so that call comes first.
        torch.get_num_threads()
        torch.set_num_threads(self._threads)
        computes_on_several_cores()
        started.set()
        while True:
            with self._changed:
                while not (self._closed or self._prefills or self._round_ready() or self._idle_warm()):
                    self._changed.wait(self._gather_left())
                if self._closed:
                    stops_computing()
                    return
                prefill = self._prefills[0] if self._prefills else None
                steps, self._steps = (self._steps, []) if self._round_ready() else ([], self._steps)
                warm = self._warm[0] if prefill is None and not steps and self._idle_warm() else None
            if prefill is not None and prefill.run_chunk():
                with self._changed:
                    self._prefills.remove(prefill)
            if steps:
                self._forward(steps)
            if warm is not None and warm.run_chunk(self.model):
                with self._changed:
                    self._warm.remove(warm)
                    self._changed.notify_all()  # wait_warm
            with self._changed:
                self._free_since = time.monotonic()
            # Drop the jobs before waiting: a finished one's runner holds its KV cache, which goes back to the
            # model's free caches for the next reply only once nothing refers to it (decoding/kv_pool.py).
            del prefill, steps, warm

    def _idle_warm(self) -> bool:
        """A warm-up chunk may run: one is queued and no reply holds a slot or waits (a reply between two of its
        steps would wait for the chunk, some 70 ms)."""
        return bool(self._warm) and not (self._holders or self._prefills or self._steps)

    def _round_ready(self) -> bool:
        """Every slot holder has handed in a block, or `gather_s` passed since the first did and the model was free."""
        return bool(self._steps) and (len(self._steps) >= self._holders or self._gather_left() == 0)

    def _gather_left(self) -> float | None:
        """Seconds until the blocks handed in so far run without the rest; None while there are none."""
        if not self._steps:
            return None
        # From the later of the first block and the last forward's end: the replies that forward served need a
        # moment to hand in their next blocks, and a window already spent during the forward would split the
        # replies into cohorts that alternate forever (measured: 3 and 1 of 4 replies, taking turns).
        return max(0.0, max(self._first_step_at, self._free_since) + self.gather_s - time.monotonic())

    def _forward(self, jobs: list[_StepJob]) -> None:
        """One forward for all `jobs`; if it fails, each alone, so that an error fails only its own reply."""
        try:
            synchronize(self.model.device)  # on CUDA a clock read around queued kernels times their launch only
            began = time.perf_counter()
            logits = self.model.forward_lanes([job.lane for job in jobs])
            if len(jobs) > 1:
                synchronize(self.model.device)
                per_reply = (time.perf_counter() - began) / len(jobs)
                last = self._lane_seconds
                self._lane_seconds = per_reply if last is None else 0.8 * last + 0.2 * per_reply
        except Exception:
            for job in jobs:
                _settle(job.logits, lambda job=job: self.model.forward_lanes([job.lane])[0][: job.rows])
            return
        for job, rows in zip(jobs, logits, strict=True):
            job.sharing.forwards += 1
            job.sharing.others += len(jobs) - 1
            job.logits.set_result(rows[: job.rows])


def _settle(future: Future, run: Callable[[], torch.Tensor]) -> None:
    try:
        future.set_result(run())
    except Exception as error:  # handed to the reply's own thread, which raises it there
        future.set_exception(error)


class ScheduledRunner:
    """A reply's forwards through a `Scheduler`: a `PackedRunner` whose prefill and steps the scheduler runs."""

    def __init__(self, scheduler: Scheduler, steps: StepConfig, sharing: Sharing) -> None:
        self.scheduler, self.sharing = scheduler, sharing
        self.runner = PackedRunner(scheduler.model, steps)

    @property
    def length(self) -> int:
        return self.runner.length

    @property
    def reused(self) -> int:
        return self.runner.reused

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor:
        return self.scheduler.prefill(self.runner.prefill_steps(prompt_ids))

    def step(self, block: list[int]) -> torch.Tensor:
        """Logits (len(block), V), the block sharing its forward with whichever replies wait with it."""
        logits = self.scheduler.step(self.runner.lane(block), self.sharing)
        self.runner.advance(len(block))
        return logits[: len(block)]

    def truncate(self, length: int) -> None:
        self.runner.truncate(length)


@torch.inference_mode()
def scheduled_llma_stream(
    scheduler: Scheduler, prompt_ids: Sequence[int], references: Sequence[Sequence[int]], policy: CopyPolicy,
    options: LlmaOptions, steps: StepConfig, result: DecodeResult | None = None, sharing: Sharing | None = None,
) -> Iterator[Chunk]:
    """`llma_stream` with the scheduler's shared forwards: the same chunks, holding a slot until the reply ends
    or the caller stops iterating (a disconnected client frees its slot at once)."""
    check_inputs(prompt_ids, options.max_new_tokens)
    steps.check_fits(len(prompt_ids), options.max_new_tokens)
    if options.max_new_tokens == 0:
        return
    # Before this thread's first torch work (the runner allocates its KV cache): a thread that once ran a region on
    # several cores keeps that OpenMP team for good, and then the scheduler's steps cost 2.5x (decoding/threads.py).
    one_core_here()
    with scheduler.slot():
        runner = ScheduledRunner(scheduler, steps, sharing if sharing is not None else Sharing())
        verifier = ModelVerifier(scheduler.model, prompt_ids, steps, options.repetition, runner=runner)
        shared = SharedForwardPolicy(policy, scheduler.lane_seconds)  # drafts weighed by the company kept
        yield from llma_steps(verifier, prompt_ids, references, shared, options, result)
