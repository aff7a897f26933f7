"""Small bench runs built by hand, so a report test knows every number that went in: no model, no saved run."""

from dataclasses import replace

from bench.results import (
    CostCurvePoints,
    GridCell,
    Machine,
    MethodRun,
    ModelInfo,
    QuestionRecord,
    Reference,
    Results,
    Settings,
    StepCost,
)
from bench.summary import summarize

METHODS = ["hf_greedy", "greedy", "hf_prompt_lookup", "llma_paper", "llma", "oracle"]
OWN_ANSWER = Reference("cache", 20, 0.8, "an earlier wording", same_group=True)
OTHER_ANSWER = Reference("cache", 20, 0.6, "another need", same_group=False)


def run(method: str, seconds: float, tokens: int = 20, passes: int | None = None, copied: int = 0,
        identical: bool = True, cpu_seconds: float | None = None) -> MethodRun:
    """One method on one question; one pass per token and CPU time equal to wall time unless given."""
    cpu = seconds if cpu_seconds is None else cpu_seconds
    return MethodRun(method, seconds, cpu, tokens, tokens if passes is None else passes, copied, identical)


def question(workload: str, text: str, *runs: MethodRun, references: tuple[Reference, ...] = ()) -> QuestionRecord:
    return QuestionRecord(workload, text, text, 50, list(references), "a reply", list(runs))


def machine(cpu_model: str = "Test CPU 9000", flags: tuple[str, ...] = ("avx2",), load: float = 0.5) -> Machine:
    return Machine(
        platform="Linux-test", processor="x86_64", python="3.12", cpu_count=2, torch_threads=2, torch="2.x",
        transformers="4.x", omp_wait_policy=None, load_average_at_start=[load, load, load],
        load_average_at_end=[load, load, load], cpu_model=cpu_model, cpu_flags=list(flags),
    )


def settings(methods: list[str], limit: int | None = 2, grid_questions: int = 0) -> Settings:
    return Settings(
        workload="questions.jsonl", articles="articles.json", max_new_tokens=64, limit=limit, repeats=1,
        methods=methods, grid_questions=grid_questions, k=4, threshold=0.5, cache_entries=3, paper_policy={},
        llma_policy={},
    )


def build(questions: list[QuestionRecord], methods: list[str] | None = None, **fields) -> Results:
    """A run of `questions` with every row summed from them; `fields` replace any other part of Results."""
    methods = methods or METHODS
    workloads = list(dict.fromkeys(q.workload for q in questions))
    results = Results(
        model=ModelInfo("test-model", "torch.float32", 1000, hf_dtype="torch.float32"),
        machine=machine(),
        settings=settings(methods),
        workloads=workloads,
        cost_curve=CostCurvePoints(sizes=[1], seconds=[0.01], context_len=256),
        rows=[summarize(w, m, [q for q in questions if q.workload == w]) for w in workloads for m in methods],
        grid=[],
        questions=questions,
        phase_seconds={"load": 1.0, **{w: 2.0 for w in workloads}},
        wall_seconds=1.0 + 2.0 * len(workloads),
    )
    return replace(results, **fields)


def resummed(results: Results) -> Results:
    """The same run with its rows summed again from its questions (after a test edited them)."""
    rows = [summarize(w, m, results.questions_of(w)) for w in results.workloads for m in results.settings.methods]
    return replace(results, rows=rows)


def grid(cells: dict[tuple[int, int], tuple[float, float, float]]) -> list[GridCell]:
    """(n, k) -> (speedup, CPU-time speedup, tokens per pass), every cell identical to greedy."""
    return [GridCell(n, k, wall, cpu, per_pass, 1.0) for (n, k), (wall, cpu, per_pass) in cells.items()]


def packed_rows(sizes: list[int], ms: list[float]) -> StepCost:
    """The packed forward's one-forward-of-n-rows cost, as Decoder.load measures it."""
    return StepCost("bfloat16, packed, one forward of n rows", sizes, ms)
