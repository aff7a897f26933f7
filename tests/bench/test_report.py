"""The report and the summing-up, on the shipped benchmark run and on hand-built runs: no model needed."""

import copy
from dataclasses import replace
from pathlib import Path

import pytest
from report_helpers import cell_value, numbers, sections, tables

from bench.methods import LLMA_METHODS
from bench.report import compute_targets, mismatch_warning, render_markdown, shortfall_section
from bench.results import MethodRun, QuestionRecord, load, summarize

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "docs" / "benchmark" / "2026-11-29-fp32"  # a fixed run: its numbers are known
PLOTS = ["speedup_by_method.png", "speedup_per_question.png", "grid_heatmap.png", "cost_curve.png"]


@pytest.fixture(scope="module")
def shipped():
    return load(SHIPPED / "results.json")


def test_the_report_has_the_shape_of_the_shipped_one(shipped):
    ours, theirs = render_markdown(shipped, PLOTS), (SHIPPED / "report.md").read_text()
    assert list(sections(ours)) == list(sections(theirs))
    for heading, body in sections(ours).items():
        ours_headers = [table[0] for table in tables(body)]
        assert ours_headers == [table[0] for table in tables(sections(theirs)[heading])], heading


def test_results_table_has_a_parsed_row_for_every_workload_and_method(shipped):
    (table,) = tables(sections(render_markdown(shipped, PLOTS))["Results"])
    header, rows = table[0], {(row[0], row[1]): row for row in table[1:]}
    assert set(rows) == {(w, m) for w in shipped.workloads for m in shipped.settings.methods}
    for row in shipped.rows:
        cells = dict(zip(header, rows[row.workload, row.method], strict=True))
        assert int(cells["questions"]) == row.questions
        assert cell_value(cells["speedup vs greedy"]) == pytest.approx(row.speedup_vs_greedy, abs=0.005)
        assert cell_value(cells["worst"]) == pytest.approx(row.worst_speedup, abs=0.005)
        assert cell_value(cells["identical"]) == pytest.approx(row.identical_share, abs=0.005)
        assert all(cell_value(cells[name]) is not None for name in header[3:] if name != "vs hf_greedy")


def test_grid_tables_have_every_cell(shipped):
    speedups, per_pass = tables(sections(render_markdown(shipped, PLOTS))["n-by-k grid"])
    for table in (speedups, per_pass):
        assert table[0][1:] == [f"k={k}" for k in sorted({c.copy_len for c in shipped.grid})]
        assert [row[0] for row in table[1:]] == [f"n={n}" for n in sorted({c.match_len for c in shipped.grid})]
    cell = shipped.grid[0]  # n=1, k=2
    assert numbers(speedups[1][1]) == pytest.approx([cell.speedup, cell.cpu_speedup], abs=0.005)
    assert cell_value(per_pass[1][1]) == pytest.approx(cell.tokens_per_pass, abs=0.005)


def test_mismatches_are_counted_in_the_identity_target_and_listed(shipped):
    assert mismatch_warning(shipped) == ""
    broken = copy.deepcopy(shipped)
    llma_rows = [r for r in broken.rows if r.method in LLMA_METHODS]
    llma_rows[0].mismatches = ["first wrong question", "second wrong question"]
    llma_rows[-1].mismatches = ["third wrong question"]
    identity = compute_targets(broken)[-1]
    runs = sum(r.questions for r in llma_rows)
    assert identity.passed is False
    assert numbers(identity.measured) == [runs - 3, runs] and numbers(identity.margin) == [3]
    warning = mismatch_warning(broken)
    listed = [line for line in warning.splitlines() if line.startswith("> -")]
    assert len(listed) == 3
    assert llma_rows[0].method in listed[0] and "first wrong question" in listed[0]
    assert "third wrong question" in listed[2] and llma_rows[-1].workload in listed[2]
    assert warning in render_markdown(broken, PLOTS)


def test_a_non_llma_method_differing_from_greedy_is_not_a_mismatch(shipped):
    broken = copy.deepcopy(shipped)
    next(r for r in broken.rows if r.method == "hf_prompt_lookup").mismatches = ["a question"]
    assert mismatch_warning(broken) == "" and compute_targets(broken)[-1].passed is True


def run(method: str, seconds: float, tokens: int = 8, passes: int = 8, copied: int = 0, identical: bool = True):
    return MethodRun(method, seconds, seconds, tokens, passes, copied, identical)


def record(question: str, greedy_seconds: float, llma: MethodRun) -> QuestionRecord:
    return QuestionRecord("novel", "g", question, 10, [], "", [run("greedy", greedy_seconds), llma])


def test_summarize_sums_seconds_and_takes_per_question_speedups():
    records = [
        record("a", 1.0, run("llma", 0.5, passes=4, copied=4)),
        record("b", 3.0, run("llma", 2.0)),
        record("c", 1.0, run("llma", 2.0, identical=False)),
    ]
    row = summarize("novel", "llma", records)
    assert row.speedup_vs_greedy == pytest.approx(5.0 / 4.5)
    assert [r.speedup("llma") for r in records] == [2.0, 1.5, 0.5]
    assert (row.worst_speedup, row.median_speedup) == (0.5, 1.5)
    assert row.tokens_per_pass == pytest.approx(24 / 20)
    assert row.mean_copied_share == pytest.approx(0.5 / 3)
    assert row.identical_share == pytest.approx(2 / 3) and row.mismatches == ["c"]
    assert row.speedup_vs_hf_greedy is None  # hf_greedy did not run
    assert summarize("novel", "oracle", records).questions == 0


def test_a_missed_target_is_explained_with_the_measured_numbers(shipped):
    # Cache-assisted: llma 1.2x at 1.8 tokens/pass copying 40%, the oracle 3.6x at 9 tokens/pass copying 90%.
    results = copy.deepcopy(shipped)
    edits = {
        ("cache_assisted", "llma"): dict(speedup_vs_greedy=1.2, tokens_per_pass=1.8, mean_copied_share=0.4),
        ("cache_assisted", "oracle"): dict(speedup_vs_greedy=3.6, tokens_per_pass=9.0, mean_copied_share=0.9),
        ("novel", "llma"): dict(worst_speedup=0.8),
        ("novel", "hf_greedy"): dict(worst_speedup=0.9),
    }
    results.rows = [replace(r, **edits.get((r.workload, r.method), {})) for r in results.rows]
    results.cost_curve = replace(results.cost_curve, sizes=[1, 2, 16], seconds=[0.05, 0.08, 0.1])
    slow = record("What is a VPN?", 1.0, run("llma", 1.25, passes=7, copied=1))
    results.questions = [q for q in results.questions if q.workload != "novel"] + [slow]
    text = shortfall_section(results, compute_targets(results))
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(bullets) == 4
    bound, needed, curve, novel = (numbers(b) for b in bullets)
    assert [1.8, 40, 9.0, 90] == bound[:4]
    assert 1.5 in needed and 4.5 in needed  # 1.8 / 1.2 = 1.5 steps per pass, times 3
    assert curve[:4] == [2, 1.6, 16, 2.0]  # 0.08 / 0.05 and 0.1 / 0.05
    assert '"What is a VPN?"' in bullets[3] and novel[:4] == [0.8, 8, 7, 1] and 0.9 in novel


def test_nothing_is_explained_when_every_target_is_met(shipped):
    results = copy.deepcopy(shipped)
    for r in results.rows:
        r.speedup_vs_greedy = {"llma": 3.0, "oracle": 3.0}.get(r.method, 1.0)
        r.worst_speedup = max(r.worst_speedup or 1.0, 1.0)
    targets = compute_targets(results)
    assert [t.passed for t in targets if "grounded" not in t.name] == [True] * 6
    assert [t.passed for t in targets if "grounded" in t.name] == [None] * 5  # a run from before grounding
    assert shortfall_section(results, compute_targets(results)) == ""
    assert "Why targets are missed" not in sections(render_markdown(results, PLOTS))


def test_the_step_cost_table_says_how_flat_the_packed_forward_is():
    packed = load(ROOT / "docs" / "benchmark" / "2026-11-30-packed-fp32-avx2-capped" / "results.json")
    rows = next(cost for cost in packed.step_costs if "one forward of n rows" in cost.label)
    ms = dict(zip(rows.sizes, rows.ms, strict=True))
    text = render_markdown(packed, PLOTS)
    assert f"4-row forward costs {ms[4] / ms[1]:.2f}x a one-row forward" in text
    assert "row forward costs" not in render_markdown(load(SHIPPED / "results.json"), PLOTS)  # no packed rows
