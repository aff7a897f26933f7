"""Running the bench: every method on the same prompts in one process, interleaved per question.

Interleaving means machine noise hits all methods alike; greedy runs first on each question (its tokens are the
truth every other method is checked against) and each method keeps its fastest of --repeats rounds. A grounded
question also runs greedy on its plain prompt in the same round: the baseline of the end-to-end speedup.
"""

import copy
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from bench.methods import (
    METHODS,
    PEER_METHODS,
    PLAIN_GREEDY,
    Decoded,
    Decoder,
    decoding_rule,
    paper_policy_json,
    processor,
)
from bench.results import (
    CostCurvePoints,
    GridCell,
    Machine,
    MethodRun,
    ModelInfo,
    QuestionRecord,
    Results,
    Settings,
    StepCost,
)
from bench.summary import grid_cell, summarize
from bench.workloads import Grounding, Item, Retrieval, prepare_workloads, select_questions
from data import load_articles, load_questions, load_staff_answers
from decoding.lane_kernel import kernel_paths

GRID_MATCH_LENS = (1, 2, 3, 4)  # n
GRID_COPY_LENS = (2, 4, 8, 16, 32)  # k
GRID_CELLS = [(n, k) for n in GRID_MATCH_LENS for k in GRID_COPY_LENS]


@dataclass(frozen=True)
class BenchConfig:
    workload: Path  # questions JSONL
    articles: Path  # article id -> text
    max_new_tokens: int
    limit: int | None  # questions per workload and grid
    methods: list[str]  # greedy included; PEER_METHODS only with --peers
    grid_questions: int
    retrieval: Retrieval
    repeats: int
    workloads: list[str]  # the ones to run, in WORKLOADS order
    grounding: Grounding = Grounding()
    dtype: str = "auto"  # the engine's: auto (as `make run` picks), float32 or bfloat16
    rule: str = "dry"  # the decoding rule greedy and LLMA share (methods.RULES): the app's by default
    step_width: str = "auto"  # "auto": measured, as a first `make run` does; "0": one-token steps; "W"
    weights: str = "auto"  # "auto": measured, as a first `make run` does; "dense", "int8" or "int4"
    step_costs: bool = True  # the step-cost table (methods.compare_step_costs)


@dataclass(frozen=True)
class Measured:
    run: MethodRun
    tokens: list[int]


def measure(decoder: Decoder, method: str, decode: Callable[[], Decoded], greedy_tokens: list[int] | None) -> Measured:
    """Time one decode; `greedy_tokens` None means a greedy run, checked against nothing."""
    passes_before = decoder.forwards.count
    start, cpu_start = time.perf_counter(), time.process_time()
    out = decode()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    passes = out.forward_passes if out.forward_passes is not None else decoder.forwards.count - passes_before
    # HF methods do not report copies: every pass yields one token of the model's own plus the accepted ones.
    copied = out.copied_tokens if out.copied_tokens is not None else max(0, len(out.tokens) - passes)
    identical = greedy_tokens is None or out.tokens == greedy_tokens
    run = MethodRun(method, seconds, cpu_seconds, len(out.tokens), passes, copied, identical,
                    out.copied_from_first_reference)
    return Measured(run, out.tokens)


def run_method(decoder: Decoder, method: str, item: Item, greedy_tokens: list[int] | None) -> Measured:
    def decode() -> Decoded:
        return decoder.decode(method, item.prompt_ids, item.references, greedy_tokens or [])

    return measure(decoder, method, decode, greedy_tokens)


def run_plain_greedy(decoder: Decoder, item: Item) -> list[MethodRun]:
    """Greedy on a grounded item's plain prompt; nothing for an ungrounded item, whose prompt is the plain one."""
    if item.plain_prompt_ids is None:
        return []
    return [measure(decoder, PLAIN_GREEDY, lambda: decoder.greedy(item.plain_prompt_ids), None).run]


def run_workload(decoder: Decoder, items: list[Item], methods: list[str], repeats: int) -> list[QuestionRecord]:
    """Every method on every question, one question at a time; greedy first (its tokens are the truth)."""
    records = []
    others = [m for m in methods if m != "greedy"]
    for item in tqdm(items, desc=items[0].workload if items else "empty", unit="question", leave=True):
        rounds = []
        for _ in range(repeats):
            greedy = run_method(decoder, "greedy", item, None)
            rounds.append([greedy.run, *run_plain_greedy(decoder, item)]
                          + [run_method(decoder, m, item, greedy.tokens).run for m in others])
        plain_tokens = len(item.plain_prompt_ids) if item.plain_prompt_ids is not None else None
        records.append(QuestionRecord(
            item.workload, item.group, item.question, len(item.prompt_ids), item.sources,
            decoder.text(greedy.tokens), fastest_of(rounds), plain_tokens,
        ))
    return records


def fastest_of(rounds: list[list[MethodRun]]) -> list[MethodRun]:
    """Per method, the round with the least wall time: noise from other processes only ever adds time."""
    return [min(same_method, key=lambda run: run.seconds) for same_method in zip(*rounds, strict=True)]


def run_cell(decoder: Decoder, item: Item, n: int, k: int, greedy_tokens: list[int]) -> MethodRun:
    def decode() -> Decoded:
        return decoder.fixed(item.prompt_ids, item.references, match_len=n, copy_len=k)

    return measure(decoder, f"n={n},k={k}", decode, greedy_tokens).run


def run_grid(decoder: Decoder, items: list[Item], repeats: int) -> list[GridCell]:
    """The paper's n-by-k figure: FixedCopyPolicy(n, k) against greedy on the same questions."""
    per_question = []  # greedy's run, then one run per cell of GRID_CELLS
    for item in tqdm(items, desc="n-by-k grid", unit="question", leave=True):
        rounds = []
        for _ in range(repeats):
            greedy = run_method(decoder, "greedy", item, None)
            rounds.append([greedy.run] + [run_cell(decoder, item, n, k, greedy.tokens) for n, k in GRID_CELLS])
        per_question.append(fastest_of(rounds))
    greedy_runs = [runs[0] for runs in per_question]
    return [grid_cell(n, k, greedy_runs, [runs[i + 1] for runs in per_question]) for i, (n, k) in enumerate(GRID_CELLS)]


def warm_up(decoder: Decoder, item: Item, methods: list[str]) -> None:
    """One short untimed run of each method: first calls allocate buffers and are slow."""
    short = copy.copy(decoder)  # shares the model and the forward counter
    short.max_new_tokens = min(8, decoder.max_new_tokens)
    greedy_tokens = short.greedy(item.prompt_ids).tokens
    for method in methods:
        short.decode(method, item.prompt_ids, item.references, greedy_tokens)


def machine_info() -> Machine:
    cpu = processor()
    return Machine(
        cpu_model=cpu.model_name,
        cpu_flags=list(cpu.flags),
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        python=platform.python_version(),
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        load_average_at_start=list(os.getloadavg()),
    )


class Stopwatch:
    """Seconds spent in each phase of the run, for the report."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 1)
        self._last = now


def run_bench(config: BenchConfig) -> Results:
    """Load everything, fill the cache, run each selected workload and the grid."""
    clock = Stopwatch()
    machine = machine_info()
    peers = any(m in PEER_METHODS for m in config.methods)
    # Measures the step width and the forward cost curve once, before any timing.
    decoder = Decoder.load(config.max_new_tokens, peers, config.dtype, config.step_width, config.weights,
                           config.step_costs)
    decoder.repetition = decoding_rule(config.rule).for_tokenizer(decoder.eos_token_id, decoder.tokenizer)
    clock.lap("load model, measure cost curve")
    articles = load_articles(config.articles)
    selection = select_questions(load_questions(config.workload), articles, config.limit)
    workloads = prepare_workloads(decoder, selection, articles, config.retrieval, load_staff_answers(),
                                  config.grounding)
    items = workloads.items
    first = next((i for w in config.workloads for i in items[w]), None)
    if first is not None:
        warm_up(decoder, first, config.methods)
    clock.lap("fill cache, warm up")
    records = {}
    for workload in config.workloads:
        records[workload] = run_workload(decoder, items[workload], config.methods, config.repeats)
        clock.lap(workload)
    grid_items = items["cache_assisted"][: min(config.grid_questions, config.limit or config.grid_questions)]
    grid = run_grid(decoder, grid_items, config.repeats) if grid_items else []
    if grid_items:
        clock.lap("grid")
    return Results(
        model=ModelInfo(
            decoder.model_id, decoder.dtype, decoder.parameters, decoder.step_width, decoder.hf_dtype,
            decoder.forward, decoder.weights, decoder.padded_steps,
            (kernel_paths() or "") if decoder.forward == "packed" else "", decoder.lane_head,
        ),
        machine=replace(machine, load_average_at_end=list(os.getloadavg()), llama_cpp=decoder.peer_version),
        settings=settings_of(config, decoder, len(grid_items), workloads.cache_entries),
        workloads=list(config.workloads),
        cost_curve=CostCurvePoints(**decoder.cost_curve_json()),
        step_costs=[StepCost(**cost) for cost in decoder.step_costs],
        rows=[summarize(w, m, records[w]) for w in config.workloads for m in METHODS + PEER_METHODS
              if m in config.methods],
        grid=grid,
        questions=[r for w in config.workloads for r in records[w]],
        phase_seconds=clock.laps,
        wall_seconds=round(sum(clock.laps.values()), 1),
    )


def settings_of(config: BenchConfig, decoder: Decoder, grid_questions: int, cache_entries: int) -> Settings:
    return Settings(
        workload=str(config.workload), articles=str(config.articles), max_new_tokens=config.max_new_tokens,
        limit=config.limit, repeats=config.repeats, methods=config.methods, grid_questions=grid_questions,
        k=config.retrieval.k, threshold=config.retrieval.threshold, cache_entries=cache_entries,
        paper_policy=paper_policy_json(), llma_policy=decoder.llma_policy_json(), grounding=asdict(config.grounding),
        repetition=decoder.repetition.to_json(),
    )
