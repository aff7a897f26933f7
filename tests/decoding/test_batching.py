"""Shared forwards: every reply decoded among 1-8 others is bit for bit the reply decoded alone.

Each case decodes some prompts alone first (greedy, and LLMA with hostile references), then runs random
mixtures of them at once through one `Scheduler` and compares every reply's tokens, forwards and copied runs.
Every wait has a deadline, so a broken scheduler fails a test instead of hanging the suite.
"""

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pytest
import torch

from decoding import (
    RECOMMENDED_REPETITION_RULE,
    REPETITION_OFF,
    AdaptiveCopyPolicy,
    CopyPolicy,
    CostCurve,
    DecodeResult,
    FixedCopyPolicy,
    LlmaOptions,
    PackedLlama,
    StepConfig,
    greedy_generate,
    llma_generate,
    load_model,
)
from decoding import scheduler as scheduler_module
from decoding.batch_probe import shared_forward_mismatches, short_block_mismatches
from decoding.lane_kernel import lane_kernel_refusal
from decoding.packed import Lane
from decoding.runners import PackedRunner
from decoding.scheduler import Scheduler, Sharing, scheduled_llma_stream
from decoding.threads import in_passing_thread, one_core_here
from decoding.weights import q4_refusal
from tests.formats import RUN_DTYPE
from tests.threads import run_at_once

from .invariance import make_tiny_model
from .test_bundled_model import QUESTIONS, chat_ids
from .test_invariance import DTYPES, hostile_references, random_ids
from .test_packed import NO_Q4

PACKED_ARCHS = ["llama", "mistral", "qwen2"]
# The app's rule, its end bonus from 24 tokens on so that it matters within 48; 2 is the tiny models' EOS, tokens
# 10-19 their digits and 22 a line break (for the grounded numbers).
TINY_DIGITS = tuple((10 + d, str(d)) for d in range(10))
APP_RULE = replace(RECOMMENDED_REPETITION_RULE, end_after=24, number_chars=TINY_DIGITS, line_break_ids=(22,))
RULES = {"greedy": REPETITION_OFF, "dry": APP_RULE.for_tokenizer(2)}
FLAT = CostCurve(sizes=(8,), seconds=(0.04,), step_width=8)
POLICIES = [FixedCopyPolicy(1, 15), FixedCopyPolicy(2, 3), AdaptiveCopyPolicy(cost=FLAT)]
NO_COPY = {"use_prompt": False, "use_output": False}  # LLMA with nothing to copy from: greedy, one token a forward
WAIT_S = 120.0  # a whole mixture takes seconds; this only bounds a broken scheduler


@dataclass(frozen=True)
class Job:
    """One reply to decode: alone first, then in company."""

    prompt: list[int]
    references: list[list[int]]
    policy: CopyPolicy
    options: LlmaOptions
    steps: StepConfig


def decode_alone(model: PackedLlama, job: Job) -> DecodeResult:
    return llma_generate(model, job.prompt, job.references, job.policy, job.options, steps=job.steps)


def decode_together(scheduler: Scheduler, jobs: list[Job]) -> tuple[list[DecodeResult], list[Sharing]]:
    """Every job in its own thread through `scheduler`, all started at once."""
    results, sharings = [DecodeResult() for _ in jobs], [Sharing() for _ in jobs]

    def run(job: Job, result: DecodeResult, sharing: Sharing) -> None:
        for _ in scheduled_llma_stream(scheduler, job.prompt, job.references, job.policy, job.options,
                                       job.steps, result, sharing):
            pass

    tasks = [lambda j=j, r=r, s=s: run(j, r, s) for j, r, s in zip(jobs, results, sharings, strict=True)]
    errors = [outcome for outcome in run_at_once(tasks, WAIT_S) if isinstance(outcome, BaseException)]
    assert not errors, errors
    return results, sharings


def fingerprint(result: DecodeResult) -> tuple:
    """What must not change with company: the tokens, and how LLMA got them."""
    return result.tokens, result.forward_passes, result.copied_runs, result.stop_reason


def check_random_mixtures(scheduler: Scheduler, jobs: list[Job], alone: list[tuple], rng: random.Random,
                          rounds: int, fewest: int) -> None:
    """`rounds` random mixtures of `fewest`..8 jobs through `scheduler` (closed after), each reply's fingerprint
    equal to the one decoded alone."""
    try:
        for _ in range(rounds):
            picks = rng.sample(range(len(jobs)), rng.randrange(fewest, 9))
            results, _ = decode_together(scheduler, [jobs[i] for i in picks])
            assert [fingerprint(r) for r in results] == [alone[i] for i in picks], picks
    finally:
        scheduler.close()


def tiny_jobs(rule_name: str, model: PackedLlama, seed: int) -> list[Job]:
    """Greedy and LLMA replies to a few prompts of different lengths, with hostile references; most prompts
    begin alike, as support prompts do, and are prefilled in chunks that the model's prefix cache shares."""
    rule, rng = RULES[rule_name], random.Random(seed)
    jobs, beginning = [], random_ids(seed=seed, n=140)
    for i in range(4):
        shared = rng.randrange(0, 140)
        # Chunks break off where the shared beginning ends, or elsewhere, or nowhere (StepConfig.prefill_break).
        steps = StepConfig(width=rng.choice([4, 8]), cache_len=256, prefill_chunk=rng.choice([None, 64, 64]),
                           prefill_break=rng.choice([0, 37, 100, shared]))
        prompt = beginning[:shared] + random_ids(seed=seed + i, n=rng.randrange(3, 40))
        options = LlmaOptions(48, 2 if rule_name == "dry" else None, repetition=rule)
        greedy = greedy_generate(model, prompt, 48, options.eos_token_id, steps=steps, repetition=rule).tokens
        jobs.append(Job(prompt, [], FixedCopyPolicy(1, 1), replace(options, **NO_COPY), steps))
        hostile = hostile_references(greedy if len(greedy) >= 3 else greedy + prompt, prompt, seed + i)
        for references in rng.sample(hostile, 2):
            jobs.append(Job(prompt, references, rng.choice(POLICIES), options, steps))
    return jobs


@pytest.mark.parametrize("lane_kernel", [True, False], ids=["kernel", "sdpa"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_a_row_in_a_shared_forward_is_bit_identical_to_the_row_alone(arch, dtype, lane_kernel):
    """Through the lane kernel (wherever it builds) and through SDPA lane by lane (CUDA, or no compiler)."""
    if lane_kernel and lane_kernel_refusal() is not None:
        pytest.skip(lane_kernel_refusal())
    model = PackedLlama(make_tiny_model(arch, DTYPES[dtype]), lane_kernel=lane_kernel)
    for width in (4, 8):
        assert shared_forward_mismatches(model, width, max_lanes=8) == [], width


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_replies_in_random_mixtures_equal_the_replies_alone(arch, dtype, rule):
    model = PackedLlama(make_tiny_model(arch, DTYPES[dtype], seed=1))
    jobs = tiny_jobs(rule, model, seed=len(arch) + len(dtype))
    uncached = PackedLlama(model.source, prefix_cache_bytes=0)  # each prompt computed whole, alone
    alone = [fingerprint(decode_alone(uncached, job)) for job in jobs]
    rng = random.Random(5)
    scheduler = Scheduler(model, max_slots=rng.choice([3, 8]))
    check_random_mixtures(scheduler, jobs, alone, rng, rounds=3, fewest=1)


def test_replies_attending_through_sdpa_in_random_mixtures_equal_the_replies_alone():
    """The per-lane SDPA path, kept where the lane kernel is not built (CUDA, no compiler)."""
    model = PackedLlama(make_tiny_model("llama", torch.bfloat16, seed=1), lane_kernel=False)
    jobs = tiny_jobs("dry", model, seed=7)
    alone = [fingerprint(decode_alone(model, job)) for job in jobs]
    rng = random.Random(7)
    check_random_mixtures(Scheduler(model, max_slots=8), jobs, alone, rng, rounds=2, fewest=2)


def test_replies_attending_batched_in_random_mixtures_equal_the_replies_alone_and_lane_by_lane():
    """The CUDA path (one SDPA call for every reply of a shared forward) forced on the CPU, unpadded so that blocks
    of 1..W rows meet: a reply alone (a batch of one) equals the reply attending lane by lane, and every reply in
    company equals it alone. Every block attends over the whole cache here (one key granule): the CPU's SDPA sums
    otherwise by the key count, where the CUDA kernel's masked key tiles add exact zeros (the probe checks it)."""
    source = make_tiny_model("llama", torch.bfloat16, seed=1)
    model = PackedLlama(source, lane_kernel=False, batched_attention=True)
    lane_by_lane = PackedLlama(source, lane_kernel=False, batched_attention=False)
    one_granule = {"padded": False, "key_granule": 256, "prefill_chunk": None, "prefill_break": 0}
    jobs = [replace(job, steps=replace(job.steps, **one_granule)) for job in tiny_jobs("dry", model, seed=9)]
    alone = [fingerprint(decode_alone(model, job)) for job in jobs]
    assert alone == [fingerprint(decode_alone(lane_by_lane, job)) for job in jobs]
    assert shared_forward_mismatches(model, 4, max_lanes=4, short_lanes=True) == []
    check_random_mixtures(Scheduler(model, max_slots=8), jobs, alone, random.Random(9), rounds=2, fewest=2)


@pytest.mark.parametrize(("arch", "weights", "lane_head"), [(arch, "int4", None) for arch in PACKED_ARCHS] + [
    pytest.param("llama", "q4", False, marks=NO_Q4), pytest.param("llama", "q4", True, marks=NO_Q4)])
def test_unpadded_int_replies_in_random_mixtures_equal_the_replies_alone(arch, weights, lane_head):
    """Unpadded steps hand in blocks of 1..W rows, so a shared forward holds any row count; with q4 the head runs on
    PyTorch's product or the lane library's (where bf16 is emulated)."""
    model = PackedLlama(make_tiny_model(arch, torch.bfloat16, seed=1), weights=weights, lane_head=lane_head)
    assert shared_forward_mismatches(model, 4, max_lanes=6, short_lanes=True) == []
    jobs = [replace(job, steps=replace(job.steps, padded=False)) for job in tiny_jobs("dry", model, seed=len(arch))]
    alone = [fingerprint(decode_alone(model, job)) for job in jobs]
    rng = random.Random(6)
    scheduler = Scheduler(model, max_slots=8)
    check_random_mixtures(scheduler, jobs, alone, rng, rounds=2, fewest=2)


def test_replies_share_forwards_and_say_with_how_many():
    """Four replies that all hold a slot before any prefills, under a gather that waits for every slot holder,
    share every decode forward, however slowly the machine runs their threads; each says so."""
    model = PackedLlama(make_tiny_model("llama", torch.float32))
    steps, options = StepConfig(4, cache_len=256), LlmaOptions(30, **NO_COPY)
    jobs = [Job(random_ids(seed=i, n=10), [], FixedCopyPolicy(1, 1), options, steps) for i in range(4)]
    scheduler = Scheduler(model, max_slots=4, gather_s=WAIT_S)
    # Left to arrive as they come, a reply stepped alone while another had no slot yet or was still prefilling
    # (72 of 87 possible companions on a loaded machine): each prefill waits here until all four hold a slot.
    all_hold_a_slot, prefill = threading.Barrier(len(jobs), timeout=WAIT_S), scheduler.prefill

    def prefill_once_all_hold_a_slot(chunks):
        all_hold_a_slot.wait()
        return prefill(chunks)

    scheduler.prefill = prefill_once_all_hold_a_slot
    try:
        results, sharings = decode_together(scheduler, jobs)
    finally:
        scheduler.close()
    assert [r.tokens for r in results] == [decode_alone(model, job).tokens for job in jobs]
    # 29 steps after the prefill each, every one with the three others
    assert [(s.forwards, s.others) for s in sharings] == [(29, 29 * 3)] * len(jobs), sharings


def test_in_company_drafts_are_weighed_by_the_reply_s_share_and_replies_stay_those_alone():
    """Unpadded steps whose extra rows are dear: a reply in company drafts less (its share of a shared forward is
    smaller than a lone step), and every reply's tokens are still the ones it gets alone."""
    steep = CostCurve(sizes=(1, 2, 4, 8), seconds=(0.010, 0.012, 0.017, 0.029), step_width=8, padded=False)
    assert steep.in_company(1.0) == steep
    assert steep.in_company(0.5).relative(2) == pytest.approx(1 + 2 * (steep.relative(2) - 1))
    drafter = AdaptiveCopyPolicy(cost=steep).start()
    drafter.lane_seconds = lambda: 0.004  # 8 replies sharing 32 ms forwards
    assert drafter.cost_now().relative(4) > 2 * steep.relative(4) - 1  # the same rows weigh more in company
    model = PackedLlama(make_tiny_model("llama", torch.bfloat16, seed=1), weights="int4")  # unpadded: as above
    jobs = [replace(job, policy=AdaptiveCopyPolicy(cost=steep), steps=replace(job.steps, padded=False))
            for job in tiny_jobs("dry", model, seed=11) if job.references]
    alone = [decode_alone(model, job) for job in jobs]
    scheduler = Scheduler(model, max_slots=8)
    try:
        together, _ = decode_together(scheduler, jobs)
    finally:
        scheduler.close()
    assert [(r.tokens, r.stop_reason) for r in together] == [(r.tokens, r.stop_reason) for r in alone]


def test_an_error_in_one_reply_fails_that_reply_only():
    model = PackedLlama(make_tiny_model("qwen2", torch.bfloat16))
    steps, options = StepConfig(4, cache_len=256), LlmaOptions(30)
    jobs = [Job(random_ids(seed=i, n=10), [], FixedCopyPolicy(1, 1), options, steps) for i in range(3)]
    broken = Lane(torch.tensor([10**6] * 4), 0, model.new_cache(256), 64)  # a token id past the vocabulary
    scheduler = Scheduler(model, max_slots=4, gather_s=1.0)  # its first round waits for the replies to join
    failure: list[BaseException] = []

    def fail_once() -> None:
        try:
            with scheduler.slot():
                scheduler.step(broken, Sharing())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=fail_once, daemon=True)
    try:
        thread.start()
        results, _ = decode_together(scheduler, jobs)
        thread.join(WAIT_S)
    finally:
        scheduler.close()
    assert len(failure) == 1 and isinstance(failure[0], IndexError)
    assert [r.tokens for r in results] == [decode_alone(model, job).tokens for job in jobs]


def test_a_machine_whose_rows_change_with_company_decodes_one_reply_at_a_time(monkeypatch):
    model = PackedLlama(make_tiny_model("llama", torch.float32))
    honest = model.forward_lanes

    def rounding_with_company(lanes, last_only=False):
        logits = honest(lanes, last_only)
        return [rows + 1e-3 * (len(lanes) > 1) for rows in logits]

    monkeypatch.setattr(model, "forward_lanes", rounding_with_company)
    assert shared_forward_mismatches(model, 4, max_lanes=3) != []
    scheduler = Scheduler.checked(model, width=4, max_slots=8)
    scheduler.close()
    assert scheduler.max_slots == 1


def test_short_blocks_whose_rows_change_in_company_are_padded_when_shared(monkeypatch):
    """Where short blocks keep their bits alone but not stacked (dense bf16 on the Xeon with AMX), the scheduler
    shares forwards of blocks padded to W rather than serving one reply at a time."""
    model = PackedLlama(make_tiny_model("llama", torch.float32))
    probed = []

    def short_lanes_change_in_company(model, width, max_lanes, short_lanes=False):
        probed.append(short_lanes)
        return not short_lanes

    monkeypatch.setattr(scheduler_module, "rows_keep_their_bits", short_lanes_change_in_company)
    scheduler = Scheduler.checked(model, width=4, max_slots=8, short_lanes=True)
    scheduler.close()
    assert (scheduler.max_slots, scheduler.pad_to, probed) == (8, 4, [True, False])


@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_unpadded_replies_padded_in_company_equal_the_replies_alone(arch):
    """Unpadded steps alone, padded to W in the shared forward: the same bits where a short block keeps them."""
    model = PackedLlama(make_tiny_model(arch, torch.bfloat16, seed=2), weights="int8")
    if short_block_mismatches(model, 4, trials=4):  # what makes the padding lossless
        pytest.skip("this CPU's int8 kernel gives a row other bits in a shorter block: its steps stay padded")
    steps = StepConfig(4, cache_len=256, padded=False)
    jobs = [replace(job, steps=steps) for job in tiny_jobs("dry", model, seed=3 * len(arch))]
    alone = [fingerprint(decode_alone(model, job)) for job in jobs]
    rng = random.Random(7)
    scheduler = Scheduler(model, max_slots=8, pad_to=4)
    check_random_mixtures(scheduler, jobs, alone, rng, rounds=2, fewest=2)


def test_beginnings_warmed_while_idle_are_held_uncounted_and_replies_stay_those_alone():
    model = PackedLlama(make_tiny_model("llama", torch.bfloat16, seed=1))
    jobs = tiny_jobs("dry", model, seed=7)  # their prompts begin with random_ids(seed=7, n=140)'s first tokens
    uncached = PackedLlama(model.source, prefix_cache_bytes=0)
    alone = [fingerprint(decode_alone(uncached, job)) for job in jobs]
    model.prefixes.clear()
    computed = model.prefixes.stats.computed_tokens
    scheduler = Scheduler(model, max_slots=4)
    scheduler.warm([random_ids(seed=7, n=140), [5, 6]], lambda n: StepConfig(4, cache_len=256, prefill_chunk=64))
    assert scheduler.wait_warm(WAIT_S)
    # Two full chunks of the first beginning; the second is shorter than a chunk, so nothing to keep.
    assert len(model.prefixes) == 2 and model.prefixes.stats.computed_tokens == computed
    check_random_mixtures(scheduler, jobs, alone, random.Random(3), rounds=2, fewest=1)


def test_a_beginning_warmed_with_its_break_keeps_its_last_partial_chunk_too():
    model = PackedLlama(make_tiny_model("llama", torch.bfloat16, seed=1))
    scheduler = Scheduler(model, max_slots=2)
    try:
        scheduler.warm([random_ids(seed=7, n=140)], lambda n: StepConfig(4, 256, prefill_chunk=64, prefill_break=n))
        assert scheduler.wait_warm(WAIT_S)
    finally:
        scheduler.close()
    assert len(model.prefixes) == 3  # 0-64, 64-128 and the beginning's last 12 tokens
    runner = PackedRunner(model, StepConfig(4, 256, prefill_chunk=64, prefill_break=140))
    runner.prefill(random_ids(seed=7, n=140) + [3, 4, 5])
    assert runner.reused == 140


def test_a_reply_abandoned_midway_frees_its_slot():
    model = PackedLlama(make_tiny_model("mistral", torch.float32))
    job = Job(random_ids(seed=3, n=10), [], FixedCopyPolicy(1, 1), LlmaOptions(30), StepConfig(4, cache_len=256))
    scheduler = Scheduler(model, max_slots=1)
    try:
        stream = scheduled_llma_stream(scheduler, job.prompt, [], job.policy, job.options, job.steps)
        next(stream), next(stream)
        stream.close()  # the client went away
        results, _ = decode_together(scheduler, [job])  # would wait for the slot forever
    finally:
        scheduler.close()
    assert results[0].tokens == decode_alone(model, job).tokens


@pytest.mark.slow
def test_bundled_replies_in_company_equal_the_replies_alone():
    """The configuration `make run` picks: the bundled model in its dtype (bf16 where the CPU has bf16 kernels or
    AVX2, else fp32), packed, q4 weights where this CPU runs them with bf16 (else dense), 4-wide steps."""
    model, tokenizer = load_model(dtype=RUN_DTYPE)
    q4 = q4_refusal() is None and RUN_DTYPE == torch.bfloat16
    packed, eos = PackedLlama(model, weights="q4" if q4 else "dense"), tokenizer.eos_token_id
    rule = RECOMMENDED_REPETITION_RULE.for_tokenizer(eos, tokenizer)  # the app's rule, grounded numbers included
    options, steps = LlmaOptions(40, eos, repetition=rule), StepConfig(4, cache_len=512)
    prompts = [chat_ids(tokenizer, q) for q in QUESTIONS[:4]]
    answers = [greedy_generate(packed, p, 40, eos, steps=steps, repetition=rule).tokens for p in prompts]
    jobs = [Job(p, [], FixedCopyPolicy(1, 1), options, steps) for p in prompts]
    for i, prompt in enumerate(prompts):  # each prompt once more, with a helpful or a hostile reference
        other = answers[(i + 1) % len(answers)]
        if i % 2:
            jobs.append(Job(prompt, [answers[i]], AdaptiveCopyPolicy(cost=FLAT), options, steps))
        else:
            jobs.append(Job(prompt, [other, answers[i][:12] * 3, prompt], FixedCopyPolicy(1, 15), options, steps))
    alone = [fingerprint(decode_alone(packed, job)) for job in jobs]
    assert [a[0] for a in alone[:4]] == answers
    scheduler = Scheduler.checked(packed, width=4, max_slots=8)
    try:
        assert scheduler.max_slots == 8, "this CPU's kernels change a row's bits with the row count"
        for picks in ([0, 1, 2, 3, 4, 5, 6, 7], [7, 2, 4]):
            results, _ = decode_together(scheduler, [jobs[i] for i in picks])
            assert [fingerprint(r) for r in results] == [alone[i] for i in picks], picks
    finally:
        scheduler.close()


@contextmanager
def scheduler_on_two_threads() -> Iterator[Scheduler]:
    """A scheduler started in a passing thread while torch's default is 2 threads, as app.py starts it; torch's
    default and the scheduler are put back afterwards."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        model = PackedLlama(make_tiny_model("llama", torch.float32))
        scheduler = in_passing_thread(lambda: Scheduler(model, max_slots=2))
        try:
            yield scheduler
        finally:
            scheduler.close()
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not torch.backends.mkl.is_available() or not os.path.isdir("/proc/self/task"),
                    reason="needs torch's MKL and /proc to count threads")
def test_a_thread_set_to_one_core_starts_no_openmp_team_even_in_mkl_vector_maths():
    """MKL sizes its own OpenMP teams (the embedding model's vector maths run through it): an asking thread on one
    core must start none, since a thread keeps its team until it ends, and with a second team on 2 cores libgomp
    stops the scheduler's threads from spinning, which made its one-row steps 2.5x dearer (decoding/threads.py)."""
    big = torch.randn(1_000_000)

    def asking() -> set[str]:
        one_core_here()
        threads = set(os.listdir("/proc/self/task"))
        torch.erf(big), torch.exp(big)  # MKL's vector maths: a team of torch's process-wide count without the fix
        return set(os.listdir("/proc/self/task")) - threads  # threads started meanwhile (ended ones do not count)

    with scheduler_on_two_threads():
        assert in_passing_thread(asking) == set()


def test_a_thread_whose_setting_torch_put_back_goes_to_one_core_again():
    """torch.set_num_threads in an asking thread puts its OpenMP setting back to several cores; the next
    one_core_here sets it to one again, before that thread's next torch work could start a team for good."""

    def asking() -> list[int]:
        one_core_here()
        first = torch.get_num_threads()
        torch.set_num_threads(2)  # as a benchmark's main thread does before each round
        put_back = torch.get_num_threads()
        one_core_here()
        return [first, put_back, torch.get_num_threads()]

    with scheduler_on_two_threads():
        assert in_passing_thread(asking) == [1, 2, 1]


def test_the_scheduler_thread_computes_on_its_creators_cores_and_other_threads_work_on_one():
    """app.py starts the service in a passing thread; while the scheduler's thread computes on several cores, other
    threads' torch work (embedding, picking tokens) runs on one in their own OpenMP setting, and torch's
    process-wide default stays as it was (decoding/threads.py)."""

    def threads_there():
        yield torch.tensor(torch.get_num_threads())

    def asking() -> int:
        one_core_here()
        return torch.get_num_threads()

    with scheduler_on_two_threads() as scheduler:
        assert in_passing_thread(asking) == 1  # an asking thread: its own setting
        assert in_passing_thread(torch.get_num_threads) == 2  # a thread started now: torch's default, untouched
        assert scheduler.prefill(threads_there()).item() == 2
        with pytest.raises(ZeroDivisionError):
            in_passing_thread(lambda: 1 / 0)  # an error comes back to the caller
