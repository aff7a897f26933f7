"""The real bench, end to end, on a tiny workload: every workload and method reported, LLMA lossless."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from report_helpers import cell_value, sections, tables

from bench.__main__ import parse_args
from bench.methods import LLMA_METHODS, METHODS, PLAIN_GREEDY
from bench.plots import PLOTS
from bench.report import GROUNDED_HEADING
from bench.results import GROUNDED_WORKLOADS, load
from bench.workloads import WORKLOADS, select_questions
from data import Question
from tests.formats import EMULATED_BF16, RUN_DTYPE, RUN_WEIGHTS
from tests.threads import TEST_THREADS

ROOT = Path(__file__).resolve().parents[2]
# The bench in an int format where the machine decodes in bf16 (int formats need it): q4 where bf16 is emulated
# (tests/formats.py), else int4; dense where it decodes in fp32
WEIGHTS = RUN_WEIGHTS if EMULATED_BF16 else "int4" if RUN_DTYPE == torch.bfloat16 else "dense"

QUESTIONS = [
    {"group": "forgot-password", "question": "How do I reset my password?", "article": "reset"},
    {"group": "forgot-password", "question": "I forgot my password, how do I get a new one?", "article": "reset"},
    {"group": "forgot-password", "question": "can you make that shorter", "article": "reset", "follow_up": True},
    {"group": "share", "question": "How do I share a folder?", "article": "share"},
    {"group": "share", "question": "how can i share a folder with my team", "article": "share"},
    {"group": "linux", "question": "Do you have a desktop app for Linux?", "article": None},
]
ARTICLES = {
    "reset": "Reset your password\nOn the sign-in page click Forgot password, enter your email address and follow "
    "the link in the email we send you to choose a new password.",
    "share": "Share a folder\nRight-click the folder, choose Share, enter the email addresses of the people to "
    "invite, pick Viewer or Editor and click Send.",
}


def bench(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "bench", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> Path:
    """Run `python -m bench` once on the tiny workload; returns its output folder."""
    folder = tmp_path_factory.mktemp("bench")
    workload, articles, out = folder / "questions.jsonl", folder / "articles.json", folder / "out"
    workload.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    articles.write_text(json.dumps(ARTICLES))
    bench("--workload", str(workload), "--articles", str(articles), "--out", str(out), "--limit", "1",
          "--max-new-tokens", "8", "--step-width", "4",  # a given width: its measurement is test_packed.py's
          "--weights", WEIGHTS, "--no-peers", "--threads", str(TEST_THREADS),
          "--no-step-costs")  # its table is rendered from saved results in test_report.py
    return out


@pytest.mark.slow
def test_every_workload_and_method_has_a_row(bench_run):
    results = load(bench_run / "results.json")
    rows = {(r.workload, r.method): r for r in results.rows}
    assert set(rows) == {(w, m) for w in WORKLOADS for m in METHODS}
    assert all(rows[w, m].questions == 1 for w in WORKLOADS for m in METHODS)
    assert results.cost_curve.seconds and len(results.grid) == 20


@pytest.mark.slow
def test_llma_output_equals_greedy_everywhere(bench_run):
    results = load(bench_run / "results.json")
    llma_rows = [r for r in results.rows if r.method in LLMA_METHODS]
    assert [r.identical_share for r in llma_rows] == [1.0] * len(llma_rows)
    assert all(cell.identical_share == 1.0 for cell in results.grid)


@pytest.mark.slow
def test_a_paraphrase_retrieves_its_groups_answer_from_the_cache(bench_run):
    (question,) = load(bench_run / "results.json").questions_of("cache_assisted")
    assert question.question == "I forgot my password, how do I get a new one?"
    assert question.has_own_answer()
    own = next(ref for ref in question.references if ref.same_group)
    assert own.question == "How do I reset my password?" and own.score >= 0.5


@pytest.mark.slow
def test_grounded_questions_carry_the_approved_answer_and_a_plain_prompt_baseline(bench_run):
    results = load(bench_run / "results.json")
    for workload in GROUNDED_WORKLOADS:
        (question,) = results.questions_of(workload)
        assert question.is_grounded(), workload  # the first wording's answer (or the staff one) is close enough
        assert question.references[0].question == "How do I reset my password?"
        assert question.prompt_tokens > question.plain_prompt_tokens  # the approved answer is in the prompt
        assert question.run(PLAIN_GREEDY).tokens > 0
        assert all(question.run(m).identical for m in LLMA_METHODS)
        assert 0 <= question.run("llma").copied_from_first_reference <= question.run("llma").copied_tokens
    (table,) = tables(sections((bench_run / "report.md").read_text())[GROUNDED_HEADING])
    assert [(row[0], row[2], row[-1]) for row in table[1:]] == [(w, "1", "0") for w in GROUNDED_WORKLOADS]


@pytest.mark.slow
def test_report_has_a_results_row_per_workload_and_method_and_plots_exist(bench_run):
    report = (bench_run / "report.md").read_text()
    (table,) = tables(sections(report)["Results"])
    assert {(row[0], row[1]) for row in table[1:]} == {(w, m) for w in WORKLOADS for m in METHODS}
    assert all(cell_value(row[3]) > 0 for row in table[1:])  # speedup vs greedy parses
    targets = tables(sections(report)["Targets"])[0]
    assert targets[-1][3] == "**PASS**"  # every LLMA output equals greedy's
    for name in PLOTS:
        assert (bench_run / name).stat().st_size > 0, name


@pytest.mark.slow
def test_redraw_writes_the_same_report_from_results_json(bench_run):
    written = (bench_run / "report.md").read_text()
    (bench_run / "report.md").unlink()
    bench("--redraw", str(bench_run / "results.json"))
    assert (bench_run / "report.md").read_text() == written


def test_workloads_option_picks_a_subset_in_bench_order():
    assert parse_args(["--workloads", "grounded_staff, grounded"]).workloads == ["grounded", "grounded_staff"]
    assert parse_args([]).workloads == list(WORKLOADS)
    with pytest.raises(SystemExit):
        parse_args(["--workloads", "grounded,nonsense"])


def test_a_limit_covers_as_many_groups_as_it_can():
    questions = [Question(group=g, question=f"{g} wording {i}", article=None) for g in "abc" for i in range(4)]
    selection = select_questions(questions, {}, limit=4)
    assert [q.question for q in selection.cache_assisted] == [
        "a wording 1", "b wording 1", "c wording 1", "a wording 2",
    ]
    assert len(select_questions(questions, {}, limit=None).cache_assisted) == 9


def test_the_concurrency_question_sets_hold_distinct_questions_of_their_kind():
    from bench.concurrency import QUESTION_SETS, distinct_questions
    from chatbot import Seed
    from data import load_questions

    group_of = {q.question: q.group for q in load_questions()}
    answers = Seed.shipped().answers
    covered, approved_questions = {a.group for a in answers}, {a.question for a in answers}
    for kind in QUESTION_SETS:
        asked = distinct_questions(40, kind)
        assert len(asked) == len(set(asked)) >= 16, kind
    first = [group_of[q] in covered for q in distinct_questions(100, "first")]
    assert first == sorted(first, reverse=True) and any(first) and not all(first)  # approved ones, then novel ones
    novel = [group_of[q] for q in distinct_questions(100, "novel")]
    groups = len(set(novel))
    assert len(set(novel[:groups])) == groups  # one question of each group before any group's second
    assert not approved_questions & set(distinct_questions(100, "rewordings"))
    assert not set(novel) & covered
    with pytest.raises(ValueError, match="question set"):
        distinct_questions(4, "popular")


def test_the_step_cost_table_puts_the_engines_step_beside_wider_forwards_and_transformers():
    """The table `python -m bench` writes unless --no-step-costs (left out of the run above), on a tiny model."""
    from bench.methods import compare_step_costs
    from decoding import Engine, measure_cost_curve
    from tests.decoding.test_packed import tiny_packed

    engine = Engine.of(tiny_packed("llama", torch.float32), None, "tiny", step_width=4)
    steps = engine.steps(256, 8)
    curve = measure_cost_curve(engine.model, steps=steps)
    rows = compare_step_costs(engine, engine.source, steps, curve)
    assert [row["label"] for row in rows] == ["float32, packed, 4-wide steps (this engine)",
                                              "float32, packed, one forward of n rows",
                                              "float32, transformers, one-token / variable-width"]
    assert rows[0]["sizes"] == [4] and rows[1]["sizes"] == [1, 2, 4, 8, 16]
    assert all(len(row["ms"]) == len(row["sizes"]) and min(row["ms"]) >= 0 for row in rows)
