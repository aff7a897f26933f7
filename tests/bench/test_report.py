"""The report of a small run built here: every number it shows is checked against the times that went in."""

from dataclasses import replace

import pytest
from report_helpers import cell_value, numbers, sections, tables
from results_builder import OTHER_ANSWER, OWN_ANSWER, build, grid, machine, packed_rows, question, resummed, run

from bench.report import mismatch_warning, render_markdown, shortfall_section
from bench.results import CostCurvePoints, ModelInfo
from bench.summary import summarize
from bench.targets import (
    CACHE_ASSISTED_SPEEDUP,
    GROUNDED_IDENTITY,
    IDENTITY,
    NOVEL_WORST,
    ORACLE_SHARE,
    VS_PAPER,
    VS_PROMPT_LOOKUP,
    compute_targets,
    end_to_end,
    same_prompt,
)

PLOTS = ["speedup_by_method.png", "cost_curve.png"]


def slow_run():
    """Cache-assisted: LLMA 1.5x (3 s of greedy over 2 s), the oracle 3x; novel: LLMA's worst question 0.8x."""
    return build([
        question("cache_assisted", "ca one", run("greedy", 2.0), run("llma", 1.0, passes=10, copied=10,
                 cpu_seconds=0.75), run("llma_paper", 1.4, passes=12, copied=8), run("oracle", 0.5, passes=5,
                 copied=15), run("hf_prompt_lookup", 4.0, passes=18, copied=2), run("hf_greedy", 6.0),
                 references=(OWN_ANSWER,)),
        question("cache_assisted", "ca two", run("greedy", 1.0), run("llma", 1.0), run("llma_paper", 1.0),
                 run("oracle", 0.5, passes=5, copied=15), run("hf_prompt_lookup", 2.0), run("hf_greedy", 3.0),
                 references=(OTHER_ANSWER,)),
        question("novel", "nv one", run("greedy", 1.0), run("llma", 1.25, passes=18, copied=2),
                 run("llma_paper", 1.0), run("oracle", 0.5), run("hf_prompt_lookup", 3.0), run("hf_greedy", 3.5)),
        question("novel", "nv two", run("greedy", 1.0), run("llma", 1.0), run("llma_paper", 1.0), run("oracle", 0.5),
                 run("hf_prompt_lookup", 3.0), run("hf_greedy", 3.0)),
    ])


def fast_run():
    """LLMA 3.33x on cache-assisted questions (the oracle 3x), never slower than greedy on novel ones."""
    return build([
        question("cache_assisted", "ca one", run("greedy", 3.0), run("llma", 0.9), run("llma_paper", 1.5),
                 run("oracle", 1.0), run("hf_prompt_lookup", 3.0), run("hf_greedy", 9.0)),
        question("novel", "nv one", run("greedy", 1.0), run("llma", 1.0), run("llma_paper", 1.0),
                 run("oracle", 1.0), run("hf_prompt_lookup", 3.0), run("hf_greedy", 3.0)),
    ])


def results_cells(results, workload: str, method: str) -> dict[str, str]:
    (table,) = tables(sections(render_markdown(results, PLOTS))["Results"])
    row = next(row for row in table[1:] if row[:2] == [workload, method])
    return dict(zip(table[0], row, strict=True))


def test_the_results_table_shows_the_sums_of_the_given_times():
    results = slow_run()
    (table,) = tables(sections(render_markdown(results, PLOTS))["Results"])
    expected = [(w, m) for w in results.workloads for m in results.settings.methods]
    assert [tuple(row[:2]) for row in table[1:]] == expected
    cells = results_cells(results, "cache_assisted", "llma")
    assert cells["questions"] == "2"
    assert cell_value(cells["speedup vs greedy"]) == pytest.approx((2.0 + 1.0) / (1.0 + 1.0))
    assert cell_value(cells["vs hf_greedy"]) == pytest.approx((6.0 + 3.0) / (1.0 + 1.0))
    assert cell_value(cells["CPU-time speedup"]) == pytest.approx((2.0 + 1.0) / (0.75 + 1.0), abs=0.005)
    assert cell_value(cells["tokens/s"]) == pytest.approx(40 / 2.0)
    assert cell_value(cells["tokens/pass"]) == pytest.approx(40 / 30, abs=0.005)
    assert cell_value(cells["worst"]) == pytest.approx(1.0 / 1.0)  # per question: 2.0 / 1.0 and 1.0 / 1.0
    assert cell_value(cells["median"]) == pytest.approx(1.5)
    assert cell_value(cells["copied"]) == pytest.approx((10 / 20 + 0 / 20) / 2)
    assert cell_value(cells["identical"]) == 1.0


def test_no_speedup_over_hf_greedy_where_it_missed_a_question():
    results = slow_run()
    novel = results.questions_of("novel")[0]
    novel.runs = [r for r in novel.runs if r.method != "hf_greedy"]
    results = resummed(results)
    assert results_cells(results, "novel", "llma")["vs hf_greedy"] == "–"
    assert cell_value(results_cells(results, "novel", "llma")["speedup vs greedy"]) == pytest.approx(2.0 / 2.25,
                                                                                                     abs=0.005)
    assert cell_value(results_cells(results, "cache_assisted", "llma")["vs hf_greedy"]) == pytest.approx(9.0 / 2.0)


def test_targets_are_named_and_measured_from_the_rows():
    targets = compute_targets(slow_run())
    llma, paper, lookup, oracle = 3.0 / 2.0, 3.0 / 2.4, 3.0 / 6.0, 3.0 / 1.0
    assert targets[CACHE_ASSISTED_SPEEDUP].passed is False
    assert numbers(targets[CACHE_ASSISTED_SPEEDUP].measured) == [pytest.approx(llma)]
    assert numbers(targets[CACHE_ASSISTED_SPEEDUP].margin) == [pytest.approx(llma - 3.0)]
    assert targets[VS_PAPER].passed is True and numbers(targets[VS_PAPER].margin) == [round((llma / paper - 1) * 100)]
    assert targets[VS_PROMPT_LOOKUP].passed is True and f"({llma / lookup:.0%})" in targets[VS_PROMPT_LOOKUP].measured
    assert targets[ORACLE_SHARE].passed is False and f"({llma / oracle:.0%})" in targets[ORACLE_SHARE].measured
    assert targets[NOVEL_WORST].passed is False and numbers(targets[NOVEL_WORST].measured) == [1.0 / 1.25]
    assert targets[IDENTITY].passed is True and numbers(targets[IDENTITY].measured) == [12, 12]  # 3 LLMA methods x 4
    assert [targets[same_prompt("grounded")].passed, targets[end_to_end("grounded_staff")].passed] == [None, None]
    assert targets[GROUNDED_IDENTITY].passed is None  # no grounded workload ran


def test_the_targets_table_has_one_row_per_target_by_name():
    results = slow_run()
    targets = compute_targets(results)
    (table,) = tables(sections(render_markdown(results, PLOTS))["Targets"])
    rows = {row[0]: row for row in table[1:]}
    assert list(rows) == list(targets)
    assert rows[ORACLE_SHARE] == [ORACLE_SHARE, ">= 80%", "1.50x vs 3.00x (50%)", "**MISS**", "-30 points"]
    assert rows[VS_PAPER][3] == "**PASS**" and rows[same_prompt("grounded")][3] == "not measured"


def test_mismatches_fail_the_identity_target_and_are_listed():
    results = slow_run()
    results.questions[1].run("llma").identical = False  # cache_assisted, "ca two"
    results.questions[2].run("oracle").identical = False  # novel, "nv one"
    results = resummed(results)
    identity = compute_targets(results)[IDENTITY]
    assert identity.passed is False
    assert numbers(identity.measured) == [10, 12] and numbers(identity.margin) == [2]
    warning = mismatch_warning(results)
    assert [line for line in warning.splitlines() if line.startswith("> -")] == [
        "> - llma on cache_assisted: ca two", "> - oracle on novel: nv one",
    ]
    assert warning in render_markdown(results, PLOTS)


def test_a_non_llma_method_differing_from_greedy_is_not_a_mismatch():
    results = slow_run()
    results.questions[0].run("hf_prompt_lookup").identical = False
    results = resummed(results)
    assert mismatch_warning(results) == "" and compute_targets(results)[IDENTITY].passed is True
    assert cell_value(results_cells(results, "cache_assisted", "hf_prompt_lookup")["identical"]) == 0.5


def test_a_missed_target_is_explained_with_the_measured_numbers():
    results = replace(slow_run(), cost_curve=CostCurvePoints([1, 2, 16], [0.05, 0.08, 0.1], 256))
    text = shortfall_section(results, compute_targets(results))
    bound, needed, curve, novel = (numbers(line) for line in text.splitlines() if line.startswith("- "))
    llma_per_pass, oracle_per_pass = 40 / 30, 40 / 10
    assert bound == pytest.approx([llma_per_pass, 25, oracle_per_pass, 75, 2.0 / 1.0, 1, 1.0 / 1.0, 1], abs=0.005)
    cost = llma_per_pass / 1.5  # one-token steps per pass: tokens per pass over the speedup
    assert needed == pytest.approx([3, cost, 3, 3 * cost, 3 * cost / llma_per_pass, llma_per_pass,
                                    oracle_per_pass / 3.0], abs=0.05)
    assert curve == pytest.approx([2, 0.08 / 0.05, 16, 0.1 / 0.05, 0.08 / 0.05 - 1, 1, 0.1 / 0.05 - 1, 15])
    assert novel == pytest.approx([1.0 / 1.25, 20, 18, 2, 1.0 / 3.5], abs=0.005)
    assert '"nv one"' in text


def test_nothing_is_explained_when_every_target_is_met():
    results = replace(fast_run(), cost_curve=CostCurvePoints([1, 2, 16], [0.05, 0.08, 0.1], 256))
    targets = compute_targets(results)
    assert {name for name, t in targets.items() if t.passed is not None} == {
        CACHE_ASSISTED_SPEEDUP, VS_PAPER, VS_PROMPT_LOOKUP, ORACLE_SHARE, NOVEL_WORST, IDENTITY,
    }
    assert all(t.passed for t in targets.values() if t.passed is not None)
    assert shortfall_section(results, targets) == ""
    assert "Why targets are missed" not in sections(render_markdown(results, PLOTS))


def test_the_grid_tables_show_every_cell():
    cells = {(1, 2): (1.2, 1.25, 1.5), (1, 4): (0.9, 0.95, 1.8), (2, 2): (1.1, 1.0, 1.4), (2, 4): (1.3, 1.35, 2.2)}
    results = replace(slow_run(), grid=grid(cells))
    speedups, per_pass = tables(sections(render_markdown(results, PLOTS))["n-by-k grid"])
    for table in (speedups, per_pass):
        assert table[0] == ["", "k=2", "k=4"] and [row[0] for row in table[1:]] == ["n=1", "n=2"]
    for (n, k), (wall, cpu, tokens_per_pass) in cells.items():
        assert numbers(speedups[n][k // 2]) == [wall, cpu]
        assert cell_value(per_pass[n][k // 2]) == tokens_per_pass
    assert "Not run" in sections(render_markdown(slow_run(), PLOTS))["n-by-k grid"]


def test_the_cpu_is_described_only_by_what_the_run_recorded():
    recorded = render_markdown(replace(slow_run(), machine=machine("Some Xeon", ("avx2", "avx512_bf16"))), PLOTS)
    assert "- CPU: Some Xeon (avx2, avx512_bf16)." in recorded.splitlines()
    unrecorded = render_markdown(replace(slow_run(), machine=machine("Some Xeon", ())), PLOTS)
    assert "- CPU: Some Xeon (flags not recorded)." in unrecorded.splitlines()
    packed = replace(slow_run(), step_costs=[packed_rows([1, 4], [10.0, 12.5])],
                     model=ModelInfo("test-model", "torch.bfloat16", 1000, step_width=4, forward="packed"),
                     cost_curve=CostCurvePoints([1, 2, 16], [0.05, 0.08, 0.1], 256))  # with a missed target's note
    report = render_markdown(packed, PLOTS).lower()
    assert "the cost curve.**" in report and "row forward costs" in report  # the notes that once named chips
    assert "amx" not in report and "gpu" not in report  # recorded flags: avx2 only; no claim about other chips


def test_the_step_cost_table_says_how_flat_the_measured_packed_forward_is():
    model = ModelInfo("test-model", "torch.bfloat16", 1000, step_width=4, forward="packed")
    results = replace(slow_run(), model=model, step_costs=[packed_rows([1, 2, 4], [10.0, 11.0, 12.5])])
    text = sections(render_markdown(results, PLOTS))["Forward cost curve"]
    assert f"4-row forward costs {12.5 / 10.0:.2f}x a one-row forward" in text and "(12.5 ms against 10.0 ms)" in text
    per_row = (12.5 - 10.0) / 3
    assert f"each row beyond the first added {per_row:.2f} ms, {per_row / 10.0:.0%} of a one-row forward" in text
    assert tables(text)[-1] == [["configuration", "1 tokens", "2 tokens", "4 tokens"],
                                ["bfloat16, packed, one forward of n rows", "10.0", "11.0", "12.5"]]
    one_token = replace(results, model=replace(model, step_width=None))
    assert "row forward costs" not in render_markdown(one_token, PLOTS)


def test_a_busy_machine_is_flagged_from_its_recorded_load():
    busy = render_markdown(replace(slow_run(), machine=machine(load=5.0)), PLOTS)
    assert "**Busy machine:** load average 5.0 on 2 CPUs" in busy
    assert "Busy machine" not in render_markdown(slow_run(), PLOTS)


def test_summarize_sums_seconds_and_takes_per_question_speedups():
    records = [
        question("novel", "a", run("greedy", 1.0, tokens=8), run("llma", 0.5, tokens=8, passes=4, copied=4)),
        question("novel", "b", run("greedy", 3.0, tokens=8), run("llma", 2.0, tokens=8)),
        question("novel", "c", run("greedy", 1.0, tokens=8), run("llma", 2.0, tokens=8, identical=False)),
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


def test_the_decoding_rule_is_named_by_the_parts_that_are_on():
    from bench.report import rule_text

    assert rule_text({}) == "plain greedy"
    assert rule_text({"dry_multiplier": 0.0, "dry_base": 1.75, "stop_ngram": 0, "end_bonus": 0.0}) == "plain greedy"
    rule = {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "stop_ngram": 16, "end_after": 96,
            "end_bonus": 0.05, "no_repeat_ngram": 0, "eos_token_id": 2}
    assert rule_text(rule) == ("greedy with dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, stop_ngram=16, "
                               "end_after=96, end_bonus=0.05")
    assert rule_text({"end_after": 96, "end_bonus": 0.05}) == "greedy with end_after=96, end_bonus=0.05"


def test_the_header_names_the_lane_library_paths_that_ran():
    model = ModelInfo("test-model", "torch.bfloat16", 1000, step_width=8, forward="packed", weights="q4",
                      kernel_paths="avx2")
    header = render_markdown(replace(slow_run(), model=model), PLOTS).splitlines()[2]
    assert "packed forward, q4 weights, the lane library's avx2 paths with 8-wide decode steps" in header
    assert "lane library" not in render_markdown(slow_run(), PLOTS)  # none ran: nothing claimed
    with_head = render_markdown(replace(slow_run(), model=replace(model, lane_head=True)), PLOTS).splitlines()[2]
    assert "the lane library's avx2 paths (the LM head's product too) with 8-wide" in with_head
