"""Are the replies right? The team's labelled questions asked through the app as `make run` serves it.

`python -m bench.answers` starts `app.py` with its defaults on a fresh data folder, asks every conversation of
data/eval_answers.jsonl through the chat API, and grades the reply to its last message: correct (every fact it
must hold, none that makes it wrong), wrong, or handed off (the hand-off, the decline, or a reply cut at its last
supported sentence and followed by staff's text, without a wrong fact). A question nothing answers is correct only
when handed off or declined. Reported per kind, the tuning part and the held-out part apart, with every reply in
full, the median reply time and, from a second run whose sentence check records and cuts nothing (`--curve`),
wrong against handed off over the check's thresholds.
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from cache.records import DECLINED, HANDED_OFF
from data import EVAL_KINDS, EvalQuestion, load_eval_questions

REPO = Path(__file__).resolve().parents[1]
CORRECT, WRONG, HANDED = "correct", "wrong", "handed off"
START_TIMEOUT_S = 900  # a fresh install measures its width and weights and seeds the help centre first
CURVE_OVERLAPS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)


@dataclass
class Asked:
    """One graded conversation: what the customer was shown for its last message, and the grade."""

    id: str
    kind: str
    split: str
    turns: list[str]
    reply: str
    outcome: str
    reason: str
    seconds: float
    grade: str
    sentences: list[dict] = field(default_factory=list)


def grade(question: EvalQuestion, reply: str, outcome: str) -> str:
    """correct, wrong or handed off (see the module docstring)."""
    text = reply.lower()
    if not question.answerable:
        return CORRECT if outcome in (HANDED_OFF, DECLINED) else WRONG
    if any(fact.lower() in text for fact in question.wrong):
        return WRONG
    if all(any(spelling.lower() in text for spelling in fact) for fact in question.must):
        return CORRECT
    return WRONG if outcome == "answered" else HANDED


# --- the app, as `make run` starts it ---------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(data_dir: Path, log: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`python app.py` with the defaults (no CHATBOT_* from this shell) but `env`; returns it and its address."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHATBOT_")}
    clean.update({"CHATBOT_DATA_DIR": str(data_dir), "CHATBOT_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
                  "PYTHONUNBUFFERED": "1", **env})
    with open(log, "a") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=clean, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app.py exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(1)
    stop_app(process)
    raise RuntimeError(f"app.py did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop_app(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def ask_all(url: str, questions: list[EvalQuestion]) -> list[Asked]:
    """Every conversation through the chat API, one after another, each turn with the replies before it."""
    from gradio_client import Client

    client = Client(f"{url}/", verbose=False)
    asked = []
    for question in questions:
        history: list[dict] = []
        for message in question.turns:
            began = time.perf_counter()
            reply, stats = client.predict(message, history, api_name="/chat")
            seconds = time.perf_counter() - began
            history += [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]
        outcome = stats.get("outcome", "answered")
        asked.append(Asked(question.id, question.kind, question.split, list(question.turns), reply, outcome,
                           stats.get("outcome_reason", ""), round(seconds, 2), grade(question, reply, outcome),
                           list(stats.get("sentences", []))))
        print(f"{question.id} {question.kind:12} {asked[-1].grade:10} {outcome:10} {seconds:5.1f}s", flush=True)
    return asked


def run_app(questions: list[EvalQuestion], data_dir: Path, env: dict[str, str]) -> list[Asked]:
    process, url = start_app(data_dir, data_dir / "app.log", env)
    try:
        return ask_all(url, questions)
    finally:
        stop_app(process)


# --- the curve: what each threshold would have shown, from replies checked but not cut ----------------------------

def cut_at(asked: Asked, overlap: float, measure: str = "overlap") -> tuple[str, bool]:
    """The reply as the sentence check at `overlap` would show it (from a run that recorded and cut nothing), and
    whether it was cut."""
    start = 0
    for sentence in asked.sentences:
        failed = "is in no source" in sentence["reason"] or sentence.get(measure, 1.0) < overlap
        if failed:
            return asked.reply[:start].rstrip(), True
        start = sentence["end"]
    return asked.reply, False


def curve(recorded: list[Asked], questions: dict[str, EvalQuestion]) -> list[dict]:
    """Wrong against handed off at each sentence-overlap threshold. A cut reply is graded on its shown prefix
    alone (the staff text after it is counted as a hand-off): the curve is conservative for "correct"."""
    points = []
    for measure in ("overlap", "pairs"):
        for overlap in CURVE_OVERLAPS:
            grades = []
            for asked in recorded:
                shown, was_cut = cut_at(asked, overlap, measure)
                outcome = asked.outcome if not was_cut else (HANDED_OFF if not shown else "cut")
                grades.append(grade(questions[asked.id], shown, outcome))
            points.append({"measure": measure, "sentence_overlap": overlap,
                           **{g: grades.count(g) for g in (CORRECT, WRONG, HANDED)}})
    return points


# --- the report ---------------------------------------------------------------------------------------------------

def tally(asked: list[Asked]) -> dict:
    return {g: sum(a.grade == g for a in asked) for g in (CORRECT, WRONG, HANDED)} | {"questions": len(asked)}


def summary(asked: list[Asked], questions: dict[str, EvalQuestion]) -> dict:
    """The issue's figures: wrong of all, correct of the answerable, handed off of those nothing covers."""
    answerable = [a for a in asked if questions[a.id].answerable]
    nothing = [a for a in asked if not questions[a.id].answerable]
    share = lambda part, whole: round(len(part) / len(whole), 3) if whole else None  # noqa: E731
    return {
        "questions": len(asked),
        "wrong_of_all": share([a for a in asked if a.grade == WRONG], asked),
        "correct_of_answerable": share([a for a in answerable if a.grade == CORRECT], answerable),
        "handed_off_of_uncovered": share([a for a in nothing if a.grade == CORRECT], nothing),
        "median_seconds": round(statistics.median(a.seconds for a in asked), 2) if asked else None,
    }


def report_markdown(results: dict) -> str:
    lines = ["# Answers: correct, wrong or handed off", "", f"{results['machine']}; `{results['command']}`", ""]
    for split in ("tune", "holdout"):
        lines += [f"## The {split} part", "", "| | " + " | ".join(results["summary"][split]) + " |",
                  "|---" * (len(results["summary"][split]) + 1) + "|",
                  "| | " + " | ".join(str(v) for v in results["summary"][split].values()) + " |", "",
                  "| kind | questions | correct | wrong | handed off |", "|---|---|---|---|---|"]
        for kind, counts in results["kinds"][split].items():
            lines.append(f"| {kind} | {counts['questions']} | {counts[CORRECT]} | {counts[WRONG]} | {counts[HANDED]} |")
        lines.append("")
    if results.get("files"):
        lines += ["## By file", "", "| file (split) | questions | wrong of all | correct of answerable | handed off of "
                  "uncovered | median seconds |", "|---|---|---|---|---|---|"]
        lines += [f"| {name} | " + " | ".join(str(v) for v in part.values()) + " |"
                  for name, part in results["files"].items()]
        lines.append("")
    if results.get("curve"):
        lines += ["## Wrong against handed off over the sentence check's threshold (all questions)", "",
                  "| measure | threshold | correct | wrong | handed off |", "|---|---|---|---|---|"]
        lines += [f"| {p['measure']} | {p['sentence_overlap']} | {p[CORRECT]} | {p[WRONG]} | {p[HANDED]} |"
                  for p in results["curve"]]
        lines.append("")
    lines += ["## Every reply", ""]
    for a in results["asked"]:
        turns = " → ".join(a["turns"])
        reason = f" ({a['reason']})" if a["reason"] else ""
        lines += [f"**{a['id']}** {a['kind']}, {a['split']}: **{a['grade']}**, {a['outcome']}{reason}, "
                  f"{a['seconds']} s", "", f"> {turns}", "", "```", a["reply"], "```", ""]
    return "\n".join(lines)


def results_of(asked: list[Asked], questions: dict[str, EvalQuestion], command: str, points: list[dict],
               sources: dict[str, str]) -> dict:
    """The summary by split, and by file and split (`sources`: each question's file) when there are several."""
    by_split = {split: [a for a in asked if a.split == split] for split in ("tune", "holdout")}
    parts: dict[str, list[Asked]] = {}
    for a in asked:
        parts.setdefault(f"{sources[a.id]} ({a.split})", []).append(a)
    return {
        "machine": machine(), "command": command,
        "summary": {split: summary(part, questions) for split, part in by_split.items()},
        "files": {name: summary(part, questions) for name, part in parts.items()} if len(set(sources.values())) > 1
        else {},
        "kinds": {split: {kind: tally([a for a in part if a.kind == kind]) for kind in EVAL_KINDS}
                  for split, part in by_split.items()},
        "curve": points, "asked": [asdict(a) for a in asked],
    }


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "CPU unknown"
    name = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    flags = lscpu.lower()
    kind = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    return f"{name} ({kind}), {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", nargs="+", default=None,
                        help="JSONL files of the same shape (default: the team's); each is also summed up alone")
    parser.add_argument("--split", choices=("tune", "holdout", "all"), default="all")
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    parser.add_argument("--data-dir", type=Path, default=None, help="reuse this data folder (default: a fresh one)")
    parser.add_argument("--env", action="append", default=[],
                        help="KEY=VALUE for app.py, e.g. CHATBOT_SOURCE_COVERAGE=0.4")
    parser.add_argument("--curve", action="store_true",
                        help="a second run, the sentence check recording only: the curve")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "answers")
    args = parser.parse_args(argv)
    files = {path: load_eval_questions(path) for path in args.questions} if args.questions else \
        {"data/eval_answers.jsonl": load_eval_questions()}
    questions = [q for file_questions in files.values() for q in file_questions]
    sources = {q.id: path for path, file_questions in files.items() for q in file_questions}
    kinds = set(args.kinds.split(",")) if args.kinds else set(EVAL_KINDS)
    chosen = [q for q in questions if q.kind in kinds and args.split in ("all", q.split)]
    env = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="answers-") as scratch:
        data_dir = args.data_dir or Path(scratch) / "var"
        data_dir.mkdir(parents=True, exist_ok=True)
        asked = run_app(chosen, data_dir, env)
        points = []
        if args.curve:
            recorded = run_app(chosen, data_dir, {**env, "CHATBOT_CHECK_REPLIES": "record"})
            points = curve(recorded, {q.id: q for q in chosen})
    command = "python -m bench.answers " + " ".join(argv if argv is not None else sys.argv[1:])
    results = results_of(asked, {q.id: q for q in chosen}, command.strip(), points, sources)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "report.md").write_text(report_markdown(results))
    print(json.dumps(results["summary"], indent=1))
    print(f"report: {args.out / 'report.md'}")


if __name__ == "__main__":
    main()
