"""Many customers at once: N customers ask distinct questions at the same moment, through the real chat service.

    python -m bench.concurrency [--customers 1,2,4,8] [--max-new-tokens 256] [--questions-each 1]
                                [--out results/concurrency]

Each N runs three times on fresh installs (the shipped articles and approved answers): **one after another**,
the N questions asked one at a time (one customer at a time: the baseline), **taking turns**, asked at once and
decoded a forward at a time as the service did before continuous batching (`max_concurrent_replies=1`), and
**batched**, asked at once, every waiting reply's block in one shared forward (the app's default). Each customer
asking at once asks in its own thread, as the web app's workers ask them. Reported per N and mode: replies per
minute, reply tokens per second and its ratio to one after another, median and p95 latency (from the moment all
ask to each one's complete reply) and the share of replies identical to the same question's reply taking turns.
`--questions-each K`: each customer asks K questions in a row, the next once its reply arrived, so N customers
keep the helpdesk busy instead of asking one burst (a later reply's latency runs from its own asking).
"""

import argparse
import statistics
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from bench.markdown import write_side_run
from bench.methods import app_engine
from bench.workloads import round_robin
from chatbot import ChatService, ChatSettings, Seed
from chatbot.deployment import open_cache
from data import group_questions, load_questions, load_staff_answers
from decoding import WEIGHTS_SETTINGS, in_passing_thread

# Each mode's most replies decoding at once. "one after another": the same customers served one at a time, each
# question asked once the reply before it ended (the baseline "one customer at a time"); the other two ask at once.
ONE_AT_A_TIME = "one after another"
MODES = {ONE_AT_A_TIME: ChatSettings.max_concurrent_replies, "taking turns": 1,
         "batched": ChatSettings.max_concurrent_replies}


@dataclass(frozen=True)
class Answered:
    question: str
    tokens: list[int]
    latency: float  # seconds from the moment all customers asked to this reply's end
    shared_with: float  # other replies in its forwards, on average


@dataclass(frozen=True)
class Round:
    """N customers at once, in one mode."""

    customers: int
    mode: str
    seconds: float  # until the last reply ended
    answered: list[Answered]

    @property
    def tokens(self) -> int:
        return sum(len(a.tokens) for a in self.answered)

    def percentile(self, p: float) -> float:
        latencies = sorted(a.latency for a in self.answered)
        return latencies[min(len(latencies) - 1, round(p * (len(latencies) - 1)))]


# What the customers ask; they differ in how much a reply can copy. None is cached, and none repeats another while
# groups last (`novel` has 28 groups: past them, a question rewords an earlier one's, whose stored reply it may copy
# from when asked after it).
QUESTION_SETS = {
    "first": "the approved answers' own questions (each group's first wording), then novel ones: most replies "
             "follow an approved answer, so one customer alone already fills each forward with a copied draft",
    "rewordings": "each group's second wording, in a customer's own words: some find their approved answer, some not",
    "novel": "questions no approved answer covers (off-topic or uncovered topics): replies are mostly greedy steps",
}


def distinct_questions(n: int, kind: str = "first") -> list[str]:
    """Up to `n` questions of QUESTION_SETS[kind], each from another group while groups last."""
    if kind not in QUESTION_SETS:
        raise ValueError(f"question set must be one of {', '.join(QUESTION_SETS)}, not {kind!r}")
    groups = {name: [q for q in wordings if not q.follow_up]
              for name, wordings in group_questions(load_questions()).items()}
    covered = {answer.group for answer in load_staff_answers()}
    picked = {
        "first": [wordings[:1] for wordings in groups.values()],
        "rewordings": [wordings[1:2] for wordings in groups.values()],
        "novel": [wordings for name, wordings in groups.items() if name not in covered],
    }[kind]
    return [q.question for q in round_robin([w for w in picked if w])][:n]


def ask_at_once(service: ChatService, questions: list[str], each: int = 1) -> tuple[float, list[Answered]]:
    """Every customer in its own thread, released together, asking `each` of the questions in a row (the next once
    its reply arrived; customer c asks questions c*each..); each reply's latency from its own asking (the first
    from the moment all were released)."""
    customers = len(questions) // each
    start = threading.Barrier(customers + 1)
    answered: list[Answered | BaseException | None] = [None] * len(questions)

    def ask(customer: int) -> None:
        start.wait()
        for i in range(customer * each, (customer + 1) * each):
            began = time.perf_counter()
            try:
                reply = service.ask(questions[i], session_id=f"customer-{customer}")
                stored = service.cache.get_reply(reply.id)
                answered[i] = Answered(questions[i], list(stored.token_ids), time.perf_counter() - began,
                                       reply.stats.shared_with)
            except BaseException as error:  # raised below, in the caller's thread
                answered[i] = error
                return

    threads = [threading.Thread(target=ask, args=(c,), daemon=True) for c in range(customers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    failed = [a for a in answered if not isinstance(a, Answered)]
    if failed:
        raise RuntimeError(f"{len(failed)} replies failed: {failed[0]!r}")
    return seconds, answered


def ask_in_turn(service: ChatService, questions: list[str], each: int = 1) -> tuple[float, list[Answered]]:
    """One question at a time, each once the reply before it ended; each customer's first reply's latency from the
    first asking (the customers all asked then, one being served at a time), later ones' from their own."""
    began, answered = time.perf_counter(), []
    for i, question in enumerate(questions):
        asked = began if i % each == 0 else time.perf_counter()
        reply = service.ask(question, session_id=f"customer-{i // each}")
        stored = service.cache.get_reply(reply.id)
        answered.append(Answered(question, list(stored.token_ids), time.perf_counter() - asked,
                                 reply.stats.shared_with))
    return time.perf_counter() - began, answered


def run_round(
    engine, customers: int, mode: str, questions: list[str], settings: ChatSettings, threads: int,
    warmed: "OrderedDict | None" = None, each: int = 1,
) -> Round:
    """A fresh install answering `questions` at once in `mode`, started as app.py starts it: the scheduler's thread
    alone computes on `threads` cores (decoding/threads.py), and the prefix cache holds what the start-up warm-up
    puts there (`warmed`: that warm-up's chunks, taken by the first round and restored for the others), nothing
    from earlier rounds."""
    settings = replace(settings, max_concurrent_replies=MODES[mode])
    with tempfile.TemporaryDirectory(prefix="concurrency-") as data_dir:
        cache = open_cache(data_dir, None, settings.max_entries, settings.embedding_model)
        service = None
        try:
            torch.set_num_threads(threads)
            service = in_passing_thread(lambda: started(engine, cache, data_dir, settings, warmed))
            # the customers' threads go to one core as they ask while the scheduler's computes (decoding/threads.py)
            ask = ask_in_turn if mode == ONE_AT_A_TIME else ask_at_once
            seconds, answered = ask(service, questions, each)
        finally:
            if service is not None and service.scheduler is not None:
                service.scheduler.close()
            cache.close()
    print(f"{customers} at once, {mode}: {seconds:.1f} s", flush=True)
    return Round(customers, mode, seconds, answered)


def started(engine, cache, data_dir: str, settings: ChatSettings, warmed: "OrderedDict | None") -> ChatService:
    prefixes = engine.prefixes
    if prefixes is not None:
        if warmed:
            prefixes.restore(warmed)
        else:
            prefixes.clear()
    service = ChatService.start(engine, cache, data_dir, settings, Seed.shipped())
    if service.scheduler is not None:
        service.scheduler.wait_warm()
    if prefixes is not None and warmed is not None and not warmed:
        warmed.update(prefixes.snapshot())
    service.ask("Hello, is anyone there?")  # first calls allocate buffers; no question of the pool
    return service


def table(rounds: list[Round]) -> str:
    turns = {r.customers: r for r in rounds if r.mode == "taking turns"}
    one_by_one = {r.customers: r for r in rounds if r.mode == ONE_AT_A_TIME}
    lines = [
        "| customers | mode | replies / min | reply tokens / s | vs one after another | median latency (s) "
        "| p95 latency (s) | shared forwards with (mean) | identical to taking turns |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        rate = r.tokens / r.seconds
        same, base = turns.get(r.customers), one_by_one.get(r.customers)
        identical = sum(a.tokens == b.tokens for a, b in zip(r.answered, same.answered, strict=True)) if same else 0
        ratio = f"{rate / (base.tokens / base.seconds):.2f}x" if base else "-"
        lines.append(
            f"| {r.customers} | {r.mode} | {60 * len(r.answered) / r.seconds:.1f} | {rate:.1f} "
            f"| {ratio} | {statistics.median(a.latency for a in r.answered):.1f} "
            f"| {r.percentile(0.95):.1f} | {statistics.mean(a.shared_with for a in r.answered):.1f} "
            f"| {identical}/{len(r.answered)} |"
        )
    return "\n".join(lines)


def plot(rounds: list[Round], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in MODES:
        mine = [r for r in rounds if r.mode == mode]
        left.plot([r.customers for r in mine], [r.tokens / r.seconds for r in mine], marker="o", label=mode)
        right.plot([r.customers for r in mine], [r.percentile(0.95) for r in mine], marker="o", label=mode)
    left.set(xlabel="customers at once", ylabel="reply tokens per second", title="Throughput")
    right.set(xlabel="customers at once", ylabel="p95 latency (s)", title="p95 latency")
    left.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--customers", default="1,2,4,8", help="how many customers ask at once, comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=ChatSettings.max_new_tokens)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("results/concurrency"))
    parser.add_argument("--weights", choices=WEIGHTS_SETTINGS, default="auto",
                        help="the packed forward's weight format (auto: as make run picks)")
    parser.add_argument("--questions-each", type=int, default=1,
                        help="questions each customer asks in a row, the next once its reply arrived (1: a burst "
                             "of N questions; more: N customers keep the helpdesk busy)")
    parser.add_argument("--questions", choices=QUESTION_SETS, default="first",
                        help="what the customers ask: " + "; ".join(f"{k}: {v}" for k, v in QUESTION_SETS.items()))
    parser.add_argument("--cold", action="store_true",
                        help="no prompt warm-up at start: each prompt prefilled whole (CHATBOT_WARM_PREFIXES=false)")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.customers.split(",")]
    except ValueError:
        parser.error("--customers: comma-separated whole numbers, e.g. 1,2,4,8")
    if any(n < 1 for n in counts):
        parser.error("--customers: each count must be at least 1")
    each = args.questions_each
    if each < 1:
        parser.error("--questions-each must be at least 1")
    torch.set_num_threads(args.threads)
    engine = in_passing_thread(lambda: app_engine(args.weights))
    print(f"Engine: {engine.describe()}", flush=True)
    settings = ChatSettings.decoding_only(max_new_tokens=args.max_new_tokens, warm_prefixes=not args.cold)
    warmed = OrderedDict() if not args.cold else None
    pool = distinct_questions(max(counts) * each * 2, args.questions)
    if len(pool) < max(counts) * each:
        parser.error(f"the shipped data holds {len(pool)} distinct questions, fewer than customers x questions each")
    rounds = []
    for i, n in enumerate(counts):
        asked = n * each  # another set each round; every mode asks the same
        questions = pool[:asked] if i % 2 == 0 else pool[-asked:]
        rounds += [run_round(engine, n, mode, questions, settings, args.threads, warmed, each) for mode in MODES]
    warm_up = "each prompt prefilled whole (--cold)" if args.cold else (
        "the help centre's prompt beginnings prefilled at start, as `make run` does (CHATBOT_WARM_PREFIXES)")
    asking = "each customer asks one question" if each == 1 else (
        f"each customer asks {each} questions in a row, the next once its reply arrived")
    body = (f"{table(rounds)}\n\nReplies of at most {args.max_new_tokens} tokens; {asking}; questions: "
            f"{QUESTION_SETS[args.questions]} (`--questions {args.questions}`); {warm_up}. "
            "![throughput and p95 latency](concurrency.png)")
    print(write_side_run(args.out, "Many customers at once", engine.describe(), body, "report.md", "rounds.json",
                         [asdict(r) for r in rounds]))
    plot(rounds, args.out / "concurrency.png")


if __name__ == "__main__":
    main()
