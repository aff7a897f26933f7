"""The grounded workloads' summary, targets and report section, on a hand-built run: no model needed."""

import copy
from pathlib import Path

import pytest
from report_helpers import cell_value, numbers, sections, tables
from results_builder import build

from bench.plots import write_plots
from bench.report import GROUNDED_HEADING, render_markdown
from bench.results import MethodRun, QuestionRecord, Reference, load
from bench.summary import summarize, summarize_grounded
from bench.targets import GROUNDED_IDENTITY, IDENTITY, compute_targets, end_to_end, same_prompt

PLOTS = ["speedup_by_method.png", "speedup_per_question.png", "grid_heatmap.png", "cost_curve.png"]
APPROVED = Reference("approved", 30, 0.8, "How do I reset my password?", True, retrieved=True)
CACHE_HIT = Reference("cache", 25, 0.7, "How do I share a folder?", False)


def run(method: str, seconds: float, tokens: int = 10, identical: bool = True, from_first: int | None = None):
    return MethodRun(method, seconds, seconds, tokens, tokens, 0, identical, from_first)


def grounded_records() -> list[QuestionRecord]:
    """Two grounded questions (with plain-prompt greedy runs) and one that found no approved answer."""
    return [
        QuestionRecord("grounded", "a", "first?", 120, [APPROVED, CACHE_HIT], "", [
            run("greedy", 2.0, tokens=20), run("plain_greedy", 1.8, tokens=18, identical=True),
            run("llma", 0.8, tokens=20, from_first=12),
        ], plain_prompt_tokens=80),
        QuestionRecord("grounded", "b", "second | with a pipe?", 110, [APPROVED], "", [
            run("greedy", 1.0), run("plain_greedy", 1.0), run("llma", 1.0, from_first=0),
        ], plain_prompt_tokens=75),
        QuestionRecord("grounded", "c", "third?", 70, [CACHE_HIT], "", [
            run("greedy", 1.0), run("llma_paper", 0.9, identical=False), run("hf_prompt_lookup", 0.9, identical=False),
            run("llma", 0.5, from_first=3),
        ]),
    ]


def test_grounded_summary_sums_seconds_and_uses_the_plain_prompt_where_grounded():
    summary = summarize_grounded("grounded", grounded_records())
    assert (summary.questions, summary.grounded) == (3, 2)
    assert summary.greedy_tokens_per_s == pytest.approx(40 / 4.0)
    assert summary.speedup == pytest.approx(4.0 / 2.3)
    # The ungrounded question's prompt is the plain one: its own greedy run is its plain baseline.
    assert summary.end_to_end_speedup == pytest.approx((1.8 + 1.0 + 1.0) / 2.3)
    assert summary.copied_from_approved == pytest.approx((12 / 20 + 0 / 10) / 2)  # grounded questions only
    assert (summary.worst_question, summary.worst_end_to_end) == ("second | with a pipe?", pytest.approx(1.0))
    assert summary.mismatches == 1  # llma_paper; hf_prompt_lookup is not an LLMA method


def test_a_workload_where_nothing_was_grounded_has_no_copy_share():
    records = [r for r in grounded_records() if not r.is_grounded()]
    summary = summarize_grounded("grounded", records)
    assert summary.grounded == 0 and summary.copied_from_approved is None
    assert summary.end_to_end_speedup == pytest.approx(summary.speedup)


@pytest.fixture()
def grounded_run():
    """A run of the `grounded` workload alone (grounded_staff not run)."""
    results = build(grounded_records())
    results.settings.grounding = {"threshold": 0.6, "answers": 1, "token_budget": 384}
    return results


def test_the_report_has_a_grounded_section_with_the_summary(grounded_run):
    report = render_markdown(grounded_run, PLOTS)
    section = sections(report)[GROUNDED_HEADING]
    (table,) = tables(section)
    header, (row,) = table[0], table[1:]
    cells = dict(zip(header, row, strict=True))
    assert cells["workload"] == "grounded" and (cells["questions"], cells["grounded"]) == ("3", "2")
    assert cell_value(cells["greedy tokens/s"]) == pytest.approx(10.0)
    assert cell_value(cells["LLMA vs greedy, same prompt"]) == pytest.approx(4.0 / 2.3, abs=0.005)
    assert cell_value(cells["end to end vs plain greedy"]) == pytest.approx(3.8 / 2.3, abs=0.005)
    assert cell_value(cells["copied from approved"]) == pytest.approx(0.3)
    assert cells["worst question (end to end)"] == '1.00x "second \\| with a pipe?"'
    assert cells["mismatches"] == "1"
    assert numbers(section.split("\n\n")[1])[:3] == [0.6, 1, 384]  # the grounding rule, from the settings
    workloads = sections(report)["Workloads"]
    assert "Grounded: 2/3, each with its own group's approved answer; the chat service's match" in workloads
    assert "would have picked it for 2/2." in workloads


def test_grounded_targets_are_measured_where_run_and_a_mismatch_fails_them(grounded_run):
    targets = compute_targets(grounded_run)
    same, whole = targets[same_prompt("grounded")], targets[end_to_end("grounded")]
    assert (same.goal, same.passed, numbers(same.measured)) == (">= 2x", False, [pytest.approx(1.74, abs=0.005)])
    assert (whole.passed, numbers(whole.measured)) == (False, [pytest.approx(1.65, abs=0.005)])
    assert targets[same_prompt("grounded_staff")].passed is None  # not run
    identity = targets[GROUNDED_IDENTITY]
    assert identity.passed is False and numbers(identity.margin) == [1]
    assert targets[IDENTITY].passed is False  # the overall identity target counts it too
    report_targets = tables(sections(render_markdown(grounded_run, PLOTS))["Targets"])[0]
    assert ["LLMA end to end vs the plain prompt's greedy, grounded", ">= 2x", "1.65x", "**MISS**", "-0.35x"] in (
        report_targets)


def test_fast_lossless_grounded_runs_pass_the_targets(grounded_run):
    fast = copy.deepcopy(grounded_run)
    for q in fast.questions_of("grounded"):
        q.runs = [r for r in q.runs if r.method != "llma_paper"]
        q.run("llma").seconds /= 2  # 0.4 + 0.5 + 0.25 = 1.15 s
    fast.rows = [r for r in fast.rows if r.workload != "grounded"]
    fast.rows += [summarize("grounded", m, fast.questions_of("grounded")) for m in fast.settings.methods]
    targets = compute_targets(fast)
    assert numbers(targets[same_prompt("grounded")].measured) == [pytest.approx(3.48, abs=0.01)]
    assert numbers(targets[end_to_end("grounded")].measured) == [pytest.approx(3.30, abs=0.01)]
    grounded = [targets[name].passed for name in (same_prompt("grounded"), end_to_end("grounded"), GROUNDED_IDENTITY)]
    assert grounded == [True, True, True]


def test_results_json_keeps_the_grounded_fields(grounded_run, tmp_path):
    grounded_run.save(tmp_path / "results.json")
    again = load(tmp_path / "results.json")
    first = again.questions_of("grounded")[0]
    assert first.plain_prompt_tokens == 80 and first.run("llma").copied_from_first_reference == 12
    assert again.settings.grounding == {"threshold": 0.6, "answers": 1, "token_budget": 384}
    assert render_markdown(again, PLOTS) == render_markdown(grounded_run, PLOTS)


def test_a_run_from_before_grounding_loads_with_defaults_and_has_no_grounded_section():
    # The results of a run from 2026-11-29, two questions of each workload kept (docs/benchmark/2026-11-29-fp32).
    old = load(Path(__file__).parent / "fixtures" / "results_before_grounding.json")
    assert old.settings.grounding == {} and old.grounded_workloads() == []
    assert all(q.plain_prompt_tokens is None and not q.is_grounded() for q in old.questions)
    assert all(r.copied_from_first_reference is None for q in old.questions for r in q.runs)
    assert GROUNDED_HEADING not in sections(render_markdown(old, PLOTS))


def test_no_grid_heatmap_when_the_grid_did_not_run(grounded_run, tmp_path):
    grounded_run.grid = []  # --grid-questions 0
    written = write_plots(grounded_run, tmp_path)
    assert [p.name for p in written] == [name for name in PLOTS if name != "grid_heatmap.png"]
    assert all(p.stat().st_size > 0 for p in written)
    assert "Not run" in sections(render_markdown(grounded_run, [p.name for p in written]))["n-by-k grid"]
