"""The real bench, end to end, on a tiny workload: every workload and method reported, LLMA lossless."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatbot.bench import LLMA_METHODS, METHODS, WORKLOADS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

QUESTIONS = [
    {"group": "reset", "question": "How do I reset my password?", "article": "reset"},
    {"group": "reset", "question": "I forgot my password, how do I get a new one?", "article": "reset"},
    {"group": "reset", "question": "can you make that shorter", "article": "reset", "follow_up": True},
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
PLOTS = ("speedup_by_method.png", "speedup_per_question.png", "grid_heatmap.png", "cost_curve.png")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> Path:
    """Run `python -m chatbot.bench` once on the tiny workload; returns its output folder."""
    folder = tmp_path_factory.mktemp("bench")
    workload, articles, out = folder / "questions.jsonl", folder / "articles.json", folder / "out"
    workload.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    articles.write_text(json.dumps(ARTICLES))
    command = [
        sys.executable, "-m", "chatbot.bench", "--workload", str(workload), "--articles", str(articles),
        "--out", str(out), "--limit", "1", "--max-new-tokens", "24",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_every_workload_and_method_has_a_row(bench_run):
    results = json.loads((bench_run / "results.json").read_text())
    rows = {(r["workload"], r["method"]): r for r in results["rows"]}
    assert set(rows) == {(w, m) for w in WORKLOADS for m in METHODS}
    assert all(rows[w, m]["questions"] == 1 for w in WORKLOADS for m in METHODS)
    assert results["cost_curve"]["seconds"] and len(results["grid"]) == 20


def test_llma_output_equals_greedy_everywhere(bench_run):
    results = json.loads((bench_run / "results.json").read_text())
    llma_rows = [r for r in results["rows"] if r["method"] in LLMA_METHODS]
    assert [r["identical_share"] for r in llma_rows] == [1.0] * len(llma_rows)
    assert all(cell["identical_share"] == 1.0 for cell in results["grid"])


def test_report_mentions_every_workload_and_plots_exist(bench_run):
    report = (bench_run / "report.md").read_text()
    assert all(workload in report for workload in WORKLOADS)
    assert "## Targets" in report
    for name in PLOTS:
        assert (bench_run / name).stat().st_size > 0, name


def test_a_limit_covers_as_many_groups_as_it_can():
    from chatbot.bench import select_questions
    from data import Question

    questions = [Question(group=g, question=f"{g} wording {i}", article=None) for g in "abc" for i in range(4)]
    selection = select_questions(questions, {}, limit=4)
    assert [q.question for q in selection.cache_assisted] == [
        "a wording 1", "b wording 1", "c wording 1", "a wording 2",
    ]
    assert len(select_questions(questions, {}, limit=None).cache_assisted) == 9


def test_report_explains_a_missed_target_from_the_measurements():
    from chatbot.bench_report import compute_targets, shortfall_section

    def row(workload, method, speedup, per_pass=1.0, copied=0.0, worst=1.0):
        return {"workload": workload, "method": method, "questions": 2, "speedup_vs_greedy": speedup,
                "tokens_per_pass": per_pass, "mean_copied_share": copied, "worst_speedup": worst, "mismatches": []}

    runs = [{"method": "greedy", "seconds": 1.0, "tokens": 8, "forward_passes": 8, "copied_tokens": 0},
            {"method": "llma", "seconds": 1.25, "tokens": 8, "forward_passes": 7, "copied_tokens": 1}]
    results = {
        "rows": [row("cache_assisted", "llma", 1.2, 1.8, 0.4), row("cache_assisted", "llma_paper", 1.0),
                 row("cache_assisted", "hf_prompt_lookup", 0.7), row("cache_assisted", "oracle", 3.6, 9.0, 0.9),
                 row("novel", "llma", 1.0, worst=0.8), row("novel", "hf_greedy", 1.0, worst=0.9)],
        "questions": [{"workload": "novel", "question": "What is a VPN?", "runs": runs}],
        "cost_curve": {"sizes": [1, 2, 16], "seconds": [0.05, 0.08, 0.1]},
    }
    text = shortfall_section(results, compute_targets(results))
    assert "1.80 tokens per forward pass" in text and "copy 90%" in text
    assert "3x needs about 4.5 tokens per pass" in text  # 1.8 / 1.2 = 1.5 steps per pass, times 3
    assert "2 tokens 1.60x, 16 tokens 2.00x" in text
    assert '"What is a VPN?" at 0.80x: 8 tokens in 7 passes, 1 copied' in text
    assert "hf_greedy, which does greedy's work, had a worst of 0.90x" in text
    passing = {**results, "rows": [row("cache_assisted", m, 3.0, 9.0) for m in ("llma", "oracle")]}
    assert shortfall_section(passing, compute_targets(passing)) == ""
