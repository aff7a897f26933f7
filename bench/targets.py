"""The bench's targets, each known by its name: the goal, what the run measured, and whether it passed."""

from dataclasses import dataclass

from bench.methods import LLMA_METHODS
from bench.results import Results
from bench.summary import grounded_summaries

SPEED_TARGET = 3.0  # LLMA over greedy on cache-assisted questions
GROUNDED_TARGET = 2.0  # LLMA on grounded questions, over greedy on the same prompt and end to end
NOVEL_LEAST = 0.95  # LLMA's worst per-question speedup on novel questions
ORACLE_SHARE_LEAST = 0.8  # LLMA's speedup as a share of the oracle's, cache-assisted

CACHE_ASSISTED_SPEEDUP = "LLMA speedup over greedy, cache-assisted"
VS_PAPER = "LLMA vs llma_paper, cache-assisted"
VS_PROMPT_LOOKUP = "LLMA vs hf_prompt_lookup, cache-assisted"
ORACLE_SHARE = "LLMA share of the oracle's speedup, cache-assisted"
CACHE_ASSISTED = (CACHE_ASSISTED_SPEEDUP, VS_PAPER, VS_PROMPT_LOOKUP, ORACLE_SHARE)
NOVEL_WORST = "LLMA worst per-question speedup, novel"
GROUNDED_IDENTITY = "every LLMA output equals greedy's, grounded"
IDENTITY = "every LLMA output equals greedy's"


def same_prompt(workload: str) -> str:
    """The name of the target: LLMA over greedy on a grounded workload's own prompt."""
    return f"LLMA over greedy on the same prompt, {workload}"


def end_to_end(workload: str) -> str:
    """The name of the target: LLMA on the grounded prompt over greedy on the plain one."""
    return f"LLMA end to end vs the plain prompt's greedy, {workload}"


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool | None  # None when the run did not measure it
    margin: str


def ratio_target(name: str, ours: float | None, theirs: float | None, least: float, goal: str) -> Target:
    """Passes when ours / theirs reaches `least` (strictly beats it when least is 1)."""
    if ours is None or theirs is None:
        return Target(name, goal, "n/a", None, "n/a")
    ratio = ours / theirs
    passed = ratio > least if least == 1 else ratio >= least
    measured = f"{ours:.2f}x vs {theirs:.2f}x ({ratio:.0%})"
    return Target(name, goal, measured, passed, f"{(ratio - least) * 100:+.0f} points")


def level_target(name: str, value: float | None, least: float) -> Target:
    """Passes when `value` reaches `least`."""
    goal = f">= {least:g}x"
    if value is None:
        return Target(name, goal, "n/a", None, "n/a")
    return Target(name, goal, f"{value:.2f}x", value >= least, f"{value - least:+.2f}x")


def identity_target(name: str, runs: int, wrong: int, measured: bool = True) -> Target:
    """Every one of `runs` LLMA replies equals greedy's; not measured when `measured` is false."""
    passed = wrong == 0 and runs > 0 if measured else None
    return Target(name, "100% identical", f"{runs - wrong}/{runs} identical", passed, f"{wrong} mismatching")


def cache_assisted_targets(results: Results) -> list[Target]:
    def speedup(method: str) -> float | None:
        row = results.row("cache_assisted", method)
        return row.speedup_vs_greedy if row else None

    llma = speedup("llma")
    return [
        level_target(CACHE_ASSISTED_SPEEDUP, llma, SPEED_TARGET),
        ratio_target(VS_PAPER, llma, speedup("llma_paper"), 1.0, "faster"),
        ratio_target(VS_PROMPT_LOOKUP, llma, speedup("hf_prompt_lookup"), 1.0, "faster"),
        ratio_target(ORACLE_SHARE, llma, speedup("oracle"), ORACLE_SHARE_LEAST, f">= {ORACLE_SHARE_LEAST:.0%}"),
    ]


def grounded_targets(results: Results) -> list[Target]:
    """LLMA >= 2x on each grounded workload, on the same prompt and end to end, and every reply identical."""
    measured = {s.workload: s for s in grounded_summaries(results) if s.questions}
    targets = []
    for workload in ("grounded", "grounded_staff"):
        summary = measured.get(workload)
        targets += [
            level_target(same_prompt(workload), summary.speedup if summary else None, GROUNDED_TARGET),
            level_target(end_to_end(workload), summary.end_to_end_speedup if summary else None, GROUNDED_TARGET),
        ]
    runs = sum(r.questions for r in results.rows if r.method in LLMA_METHODS and r.workload in measured)
    wrong = sum(s.mismatches for s in measured.values())
    return [*targets, identity_target(GROUNDED_IDENTITY, runs, wrong, measured=bool(measured))]


def compute_targets(results: Results) -> dict[str, Target]:
    """Every target by name, in the order the report lists them."""
    novel = results.row("novel", "llma")
    runs = sum(r.questions for r in results.rows if r.method in LLMA_METHODS)
    targets = [
        *cache_assisted_targets(results),
        level_target(NOVEL_WORST, novel.worst_speedup if novel else None, NOVEL_LEAST),
        *grounded_targets(results),
        identity_target(IDENTITY, runs, len(results.llma_mismatches())),
    ]
    return {t.name: t for t in targets}


def missed(targets: dict[str, Target]) -> set[str]:
    """The names of the targets the run measured and did not meet."""
    return {name for name, t in targets.items() if t.passed is False}
