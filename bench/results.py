"""What a bench run measured, as dataclasses: written to results.json with `save()`, read back with `load()`.

Speedups are defined here once: greedy's seconds over a method's, summed over questions or per question.
Everything derived from these records (rows, summaries, the figures the report explains) is in bench/summary.py.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.methods import LLMA_METHODS, PEER_METHODS, PLAIN_GREEDY

GROUNDED_WORKLOADS = ("grounded", "grounded_staff")  # an approved answer in the prompt, end-to-end speedups


@dataclass(frozen=True)
class Reference:
    """Where one reference of a question came from (a cache hit, an article, an earlier answer)."""

    kind: str  # "approved" (also in the prompt), "cache", "article", "stored_answer", "earlier_answer"
    tokens: int
    score: float | None = None  # cosine similarity, for cache hits
    question: str = ""  # the stored question, for cache hits
    same_group: bool = True  # a wording of the same need (always true except for cache hits)
    retrieved: bool | None = None  # for an approved answer: would the chat service's lookup have picked it


@dataclass
class MethodRun:
    """One method on one question."""

    method: str
    seconds: float  # wall clock
    cpu_seconds: float  # CPU time of this process: less moved than wall clock by other processes' work
    tokens: int
    forward_passes: int
    copied_tokens: int
    identical: bool  # the same tokens as greedy decoding
    copied_from_first_reference: int | None = None  # LLMA: tokens copied from references[0] (the approved answer)


def speedup(greedy: list[MethodRun], runs: list[MethodRun]) -> float:
    """Greedy's seconds over the method's, each summed over the same questions."""
    return sum(g.seconds for g in greedy) / sum(r.seconds for r in runs)


def cpu_speedup(greedy: list[MethodRun], runs: list[MethodRun]) -> float:
    return sum(g.cpu_seconds for g in greedy) / sum(r.cpu_seconds for r in runs)


@dataclass
class QuestionRecord:
    workload: str
    group: str
    question: str
    prompt_tokens: int
    references: list[Reference]
    greedy_text: str
    runs: list[MethodRun]
    plain_prompt_tokens: int | None = None  # grounded questions: the prompt without the approved answer

    def run(self, method: str) -> MethodRun | None:
        return next((r for r in self.runs if r.method == method), None)

    def speedup(self, method: str) -> float | None:
        """This question's speedup of `method` over greedy; None when the method did not run on it."""
        run = self.run(method)
        return speedup([self.run("greedy")], [run]) if run else None

    def is_grounded(self) -> bool:
        """An approved answer was put into the prompt (and is the first reference)."""
        return bool(self.references) and self.references[0].kind == "approved"

    def plain_greedy(self) -> MethodRun:
        """Greedy on the prompt without grounding: the plain prompt's run, or greedy's where nothing was added."""
        return self.run(PLAIN_GREEDY) or self.run("greedy")

    def end_to_end_speedup(self, method: str) -> float | None:
        """Greedy on the plain prompt over `method` on the grounded one, the longer prefill included."""
        run = self.run(method)
        return speedup([self.plain_greedy()], [run]) if run else None

    def copied_from_approved_share(self, method: str) -> float | None:
        """Share of the reply copied from the approved answer; None when ungrounded or not reported."""
        run = self.run(method)
        if not (self.is_grounded() and run and run.copied_from_first_reference is not None):
            return None
        return run.copied_from_first_reference / run.tokens if run.tokens else 0.0

    def has_own_answer(self) -> bool:
        """A cache hit among the references answers a wording of the same need."""
        return any(ref.kind == "cache" and ref.same_group for ref in self.references)


@dataclass
class Row:
    """One method on one workload, summed over its questions."""

    workload: str
    method: str
    questions: int
    tokens: int
    seconds: float
    tokens_per_s: float | None
    speedup_vs_greedy: float | None  # sum of greedy seconds / sum of this method's seconds
    speedup_vs_hf_greedy: float | None
    cpu_speedup_vs_greedy: float | None  # the same in CPU seconds: a cross-check when the machine is noisy
    tokens_per_pass: float | None
    identical_share: float | None
    worst_speedup: float | None  # per question, over greedy
    median_speedup: float | None
    mean_copied_share: float | None
    mismatches: list[str] = field(default_factory=list)  # questions whose tokens differ from greedy's


@dataclass
class GridCell:
    match_len: int  # n
    copy_len: int  # k
    speedup: float | None  # over greedy, wall clock
    cpu_speedup: float | None  # over greedy, CPU time
    tokens_per_pass: float | None
    identical_share: float | None


@dataclass(frozen=True)
class Mismatch:
    """An LLMA method whose tokens differ from greedy's on one question: a losslessness bug."""

    method: str
    workload: str
    question: str


@dataclass
class ModelInfo:
    id: str
    dtype: str  # of this project's engine (greedy, llma, ...)
    parameters: int
    step_width: int | None = None  # every decode forward this wide; None: one-token steps
    hf_dtype: str = ""  # of transformers' generate (hf_greedy, hf_prompt_lookup)
    forward: str = "transformers"  # the engine's forward: "packed" (decoding/packed.py) or transformers'
    weights: str = "dense"  # the packed forward's weight format: "dense" (the dtype), "int8" or "int4"
    padded_steps: bool = True  # short blocks padded to the width (False: measured to keep their bits unpadded)
    kernel_paths: str = ""  # the lane library's vector paths that ran (decoding.lane_kernel): "avx2", ...; "" none
    lane_head: bool = False  # the LM head ran on the lane library's product (decoding/csrc/head_product.cpp)


@dataclass
class Machine:
    platform: str
    processor: str
    python: str
    cpu_count: int | None
    torch_threads: int
    torch: str
    transformers: str
    omp_wait_policy: str | None
    load_average_at_start: list[float]
    load_average_at_end: list[float] = field(default_factory=list)
    cpu_model: str = ""
    cpu_flags: list[str] = field(default_factory=list)  # the ones that choose the fast path: bf16, AMX, AVX
    llama_cpp: str = ""  # llama-cpp-python's version when the run had --peers

    def busiest_load(self) -> float:
        return max(self.load_average_at_start[0], self.load_average_at_end[0])


@dataclass
class Settings:
    workload: str  # the questions file
    articles: str
    max_new_tokens: int
    limit: int | None
    repeats: int
    methods: list[str]
    grid_questions: int
    k: int  # cache hits used as references
    threshold: float
    cache_entries: int
    paper_policy: dict  # FixedCopyPolicy's fields
    llma_policy: dict  # AdaptiveCopyPolicy's fields but its cost curve
    grounding: dict = field(default_factory=dict)  # threshold, answers, token_budget of the grounded workloads
    repetition: dict = field(default_factory=dict)  # the decoding rule greedy and LLMA shared ({}: plain greedy)


@dataclass
class CostCurvePoints:
    """Seconds of one forward of sizes[i] new tokens over a context_len-token KV cache."""

    sizes: list[int]
    seconds: list[float]
    context_len: int
    step_width: int | None = None  # the engine's step width: every forward is that wide, unless unpadded
    padded: bool = True  # False: short blocks run as they are, `sizes` then the rows 1.. up to the width

    def relative(self) -> dict[int, float]:
        """Each size's cost in one-token steps."""
        return {n: s / self.seconds[0] for n, s in zip(self.sizes, self.seconds, strict=True)}


@dataclass
class StepCost:
    """Milliseconds of one decode forward of n new tokens in one engine configuration, over a warm cache."""

    label: str
    sizes: list[int]
    ms: list[float]


@dataclass
class Results:
    model: ModelInfo
    machine: Machine
    settings: Settings
    workloads: list[str]
    cost_curve: CostCurvePoints
    rows: list[Row]
    grid: list[GridCell]
    questions: list[QuestionRecord]
    phase_seconds: dict[str, float]
    wall_seconds: float
    step_costs: list[StepCost] = field(default_factory=list)  # the engine's step against one-token steps

    def row(self, workload: str, method: str) -> Row | None:
        """The row of a method on a workload, or None when it measured no question."""
        row = next((r for r in self.rows if r.workload == workload and r.method == method), None)
        return row if row and row.questions else None

    def questions_of(self, workload: str) -> list[QuestionRecord]:
        return [q for q in self.questions if q.workload == workload]

    def grounded_workloads(self) -> list[str]:
        return [w for w in self.workloads if w in GROUNDED_WORKLOADS]

    def peer_methods(self) -> list[str]:
        """The --peers methods this run measured; empty without --peers."""
        return [m for m in PEER_METHODS if any(r.method == m and r.questions for r in self.rows)]

    def llma_mismatches(self) -> list[Mismatch]:
        return [Mismatch(r.method, r.workload, q) for r in self.rows if r.method in LLMA_METHODS for q in r.mismatches]

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))


def load(path: Path) -> Results:
    """A run saved as results.json."""
    saved = json.loads(Path(path).read_text())
    return Results(
        model=ModelInfo(**saved["model"]),
        machine=Machine(**saved["machine"]),
        settings=Settings(**saved["settings"]),
        workloads=saved["workloads"],
        cost_curve=CostCurvePoints(**saved["cost_curve"]),
        rows=[Row(**row) for row in saved["rows"]],
        grid=[GridCell(**cell) for cell in saved["grid"]],
        questions=[_question(q) for q in saved["questions"]],
        phase_seconds=saved["phase_seconds"],
        wall_seconds=saved["wall_seconds"],
        step_costs=[StepCost(**cost) for cost in saved.get("step_costs", [])],
    )


def _question(saved: dict) -> QuestionRecord:
    references = [Reference(**ref) for ref in saved["references"]]
    runs = [MethodRun(**run) for run in saved["runs"]]
    return QuestionRecord(**{**saved, "references": references, "runs": runs})
