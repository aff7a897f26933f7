"""The `service` workload: rewordings asked through the real chat turn, beside plain greedy decoding.

    python -m bench.service [--questions 16] [--novel 8] [--max-new-tokens 256] [--half held-out] [--weights auto]

A fresh install (the shipped articles and approved staff answers) answers each selected group's first
wording through the chat service first, as customers would have asked; then every selected rewording goes
through the same turn `make run` serves (hybrid match, article, consistency check, grounding, references,
LLMA). Each reply is rerun by Verify (greedy on the same prompt, same rule and step shape: identical?), and
the question is decoded once more with greedy alone, grounding off and no references: the baseline of the end
to end speedup. Rewordings come from the half of the groups that bench.retrieval never tuned on (`--half`);
questions of groups with no approved answer (novel ones, topics nothing covers) must stay ungrounded.
The retrieval-only curve over the threshold (no decoding) comes from bench.retrieval on the same half.
Threads as `make run` has them (decoding/threads.py): the model loads and the service starts in passing threads,
the scheduler's thread alone computes on several cores, and every decode (the reply, Verify, plain greedy) runs
through it; questions are embedded on one core. A second thread with a team of its own (this script's asking
thread, as it was before) made a one-row step 1.6x dearer (8.6 against 13.8 ms, AMD EPYC), and plain greedy's
hundred steps more than LLMA's twenty.
"""

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bench.markdown import fmt, table, write_side_run
from bench.methods import app_engine
from bench.retrieval import half_of
from bench.retrieval import measure as measure_retrieval
from bench.workloads import round_robin
from cache import Embedder
from cache.embedder import DEFAULT_MODEL as DEFAULT_EMBEDDING_MODEL
from cache.embedder import DTYPES as EMBEDDING_DTYPES
from chatbot import ChatService, ChatSettings, Reply, Seed, Verification
from chatbot.deployment import open_cache
from chatbot.prompt import LAYOUTS
from chatbot.settings import embedding_dtype_for
from data import Question, group_questions, load_questions, load_staff_answers
from decoding import DEFAULT_PREFIX_CACHE_BYTES, in_passing_thread
from decoding.weights import WEIGHT_FORMATS

WARM_NOTES = {False: "prompt beginnings warmed at start, as `make run` does", True: "no prompt warm-up (--cold)"}
OWN_NOTE = "; the model's own grounded first replies approved in place of the staff-written answers"


@dataclass(frozen=True)
class Served:
    """One question through the chat turn, and the greedy decodes it is compared with."""

    group: str
    question: str
    covered: bool  # its group has an approved answer
    grounded_group: str | None  # the group of the approved answer put into the prompt (None: none)
    tokens: int
    copied_share: float  # of the reply's tokens, copied from any reference, the prompt or the reply itself
    copied_from_approved: float  # of the reply's tokens, copied from the approved answer in its prompt
    seconds: float  # the reply's decode as served (LLMA): prefill and steps
    greedy_seconds: float  # Verify: greedy on the same prompt, prefill and steps
    identical: bool
    waited_seconds: float  # the whole turn as served, question to last text chunk (ask_timed)
    plain_greedy_seconds: float  # the turn with grounding off and no references, greedy: what the app did without
    plain_tokens: int


def select(questions: list[Question], half: str, covered: set[str], limit: int, novel: int) -> tuple[list, list]:
    """The rewordings of covered groups in `half` (one per group first) and the wordings of uncovered ones."""
    groups = {g: qs for g, qs in group_questions(questions).items() if half_of(g) == half}
    reworded = round_robin([[q for q in qs[1:] if not q.follow_up] for g, qs in groups.items() if g in covered])
    uncovered = round_robin([[q for q in qs if not q.follow_up] for g, qs in groups.items() if g not in covered])
    return reworded[:limit], uncovered[:novel]


def plain_greedy(service: ChatService, question: str) -> tuple[float, int]:
    """Seconds and tokens of the turn with grounding off (the article stays) and greedy decoding: the question
    planned (embedded, its article found), then decoded through the scheduler as the app decodes (on the model
    itself where there is none)."""
    off = service.with_settings(grounding="off")
    start = time.perf_counter()
    turn = off.planner.plan(question, None, "")
    result = service.greedy(turn.prompt.ids, service.settings.max_new_tokens, turn.steps, service.rule)
    return time.perf_counter() - start, len(result.tokens)


def ask_timed(service: ChatService, question: str) -> tuple[Reply, float]:
    """The final reply, and the seconds from the question to its last text chunk: what the customer waits for
    (planning, the KV cache, prefill and decode; storing the answer after it is not counted)."""
    start = time.perf_counter()
    text_done = start
    for reply in service.stream(question):
        if not reply.done or text_done == start:  # a reply whose only chunk is the final one ends there
            text_done = time.perf_counter()
    return reply, text_done - start


def serve(
    service: ChatService, q: Question, covered: bool, group_of_entry: dict[int, str], baselines: bool,
    as_after_start: Callable[[], None],
) -> Served:
    """Ask `q` through the chat turn; with `baselines`, Verify it and decode plain greedy beside it. Each of the
    three starts from the prefix cache as it was after the start (`as_after_start`): none reuses another's prompt."""
    as_after_start()
    reply, waited = ask_timed(service, q.question)
    as_after_start()
    check = service.verify(reply.id) if baselines else Verification(reply.id, True, 0.0, reply.stats.seconds, 0.0)
    grounded = [group_of_entry.get(use.id, "?") for use in reply.stats.grounding]
    as_after_start()
    plain_seconds, plain_tokens = plain_greedy(service, q.question) if baselines else (0.0, 0)
    from_approved = reply.stats.followed_share
    served = Served(q.group, q.question, covered, grounded[0] if grounded else None, reply.stats.tokens,
                    reply.stats.copied_share, from_approved, check.reply_seconds, check.greedy_seconds, check.identical,
                    waited, plain_seconds, plain_tokens)
    print(f"{q.group}: grounded by {served.grounded_group}, {served.tokens} tokens, {served.copied_share:.0%} "
          f"copied ({from_approved:.0%} from the approved answer), identical={served.identical}: {q.question[:60]}",
          flush=True)
    return served


def approve_own_reply(service: ChatService, entry_id: int, reply_id: int) -> None:
    """Staff store the model's grounded reply as the approved entry's answer after review, as an edit does."""
    stored = service.cache.get_reply(reply_id)
    service.cache.update_entry(entry_id, answer=stored.answer, answer_ids=stored.token_ids, review="approved")


def summary(served: list[Served], timed: bool) -> str:
    """The issue's measures; without `timed` (--copy-only) the ones that need Verify and plain greedy are left out."""
    covered = [s for s in served if s.covered]
    grounded = [s for s in covered if s.grounded_group]
    novel = [s for s in served if not s.covered]
    ratio = lambda num, den: sum(num) / max(sum(den), 1e-9)  # noqa: E731
    rows = [
        ["grounding coverage (covered rewordings that got an approved answer)", _share(len(grounded), len(covered))],
        ["precision (the right group's)", _share(sum(s.grounded_group == s.group for s in grounded), len(grounded))],
        ["novel / uncovered questions grounded", _share(sum(bool(s.grounded_group) for s in novel), len(novel))],
        ["copied share, all replies", fmt(100 * sum(s.copied_share for s in served) / max(len(served), 1), ".0f",
                                          "%")],
        ["copied share, grounded replies", fmt(100 * sum(s.copied_share for s in grounded) / max(len(grounded), 1),
                                               ".0f", "%")],
        ["copied from the approved answer, grounded replies",
         fmt(100 * sum(s.copied_from_approved for s in grounded) / max(len(grounded), 1), ".0f", "%")],
        ["LLMA vs greedy on the same prompt", fmt(ratio([s.greedy_seconds for s in served],
                                                        [s.seconds for s in served]), ".2f", "x")],
        # Whole turns on both sides: question planned, KV cache, prefill, decode (bench.service.ask_timed).
        ["end to end vs plain greedy (grounding off, no references)",
         fmt(ratio([s.plain_greedy_seconds for s in served], [s.waited_seconds for s in served]), ".2f", "x")],
        ["end to end vs plain greedy, the rewordings (covered groups) only",
         fmt(ratio([s.plain_greedy_seconds for s in covered], [s.waited_seconds for s in covered]), ".2f", "x")],
        # Plain greedy's reply to the ungrounded prompt has its own length: tokens per second compares the rates.
        ["reply tokens per second, the rewordings: as served / plain greedy",
         f"{ratio([s.tokens for s in covered], [s.waited_seconds for s in covered]):.0f} / "
         f"{ratio([s.plain_tokens for s in covered], [s.plain_greedy_seconds for s in covered]):.0f}"],
        ["identical to greedy on its own prompt", _share(sum(s.identical for s in served), len(served))],
    ]
    return table(["measure", "value"], rows if timed else rows[:6])


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.0f}%)" if total else "–"


def curve_table(points: list) -> str:
    rows = [[str(t), fmt(100 * s.coverage, ".0f", "%"), fmt(100 * s.precision, ".0f", "%"),
             fmt(100 * s.novel_grounded, ".0f", "%")] for t, s in points if 0.25 <= t <= 1.0]
    return table(["threshold", "coverage (recall)", "precision", "novel grounded"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.service", description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=16, help="rewordings of groups with an approved answer")
    parser.add_argument("--novel", type=int, default=8, help="questions of groups with none")
    parser.add_argument("--max-new-tokens", type=int, default=ChatSettings.max_new_tokens)
    parser.add_argument("--half", choices=("held-out", "tune"), default="held-out")
    parser.add_argument("--layout", choices=LAYOUTS, default=ChatSettings.prompt_layout,
                        help="where the approved answer sits in the prompt (CHATBOT_PROMPT_LAYOUT)")
    parser.add_argument("--approve-own", action="store_true",
                        help="staff approve the model's own grounded reply to each first wording in place of the "
                             "staff-written answer (their facts, the model's phrasing)")
    parser.add_argument("--copy-only", action="store_true",
                        help="no Verify and no plain greedy: coverage and copied share only (token counts, not times)")
    parser.add_argument("--cold", action="store_true",
                        help="no prompt warm-up: every prompt prefilled whole (CHATBOT_WARM_PREFIXES=false)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--weights", default="auto", choices=("auto", *WEIGHT_FORMATS),
                        help="the packed forward's weight format (CHATBOT_WEIGHTS); auto is measured at every start")
    parser.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL, help="as CHATBOT_EMBEDDING_MODEL")
    parser.add_argument("--embedding-dtype", default="auto", choices=("auto", *EMBEDDING_DTYPES),
                        help="as CHATBOT_EMBEDDING_DTYPE")
    parser.add_argument("--out", type=Path, default=Path("results/service"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    staff = load_staff_answers()
    covered = {answer.group for answer in staff}
    reworded, novel = select(load_questions(), args.half, covered, args.questions, args.novel)
    # One reply at a time on the model itself, so greedy baselines and replies share the same forward; every
    # question decoded and shown whole (the app's hand-off and checks are bench.answers').
    settings = ChatSettings.decoding_only(
        max_new_tokens=args.max_new_tokens, max_concurrent_replies=1, prompt_layout=args.layout,
        embedding_model=args.embedding_model, warm_prefixes=not args.cold,
        embedding_dtype=embedding_dtype_for(args.embedding_dtype))
    # The prefix cache holds what the start-up warm-up put there and nothing else whenever a decode starts: the
    # reply, its greedy rerun and plain greedy each prefill the rest of their own prompt.
    engine = in_passing_thread(lambda: app_engine(args.weights, 0 if args.cold else DEFAULT_PREFIX_CACHE_BYTES))
    print(f"Engine: {engine.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="service-") as data_dir:
        cache = open_cache(data_dir, None, settings.max_entries, settings.embedding_model, settings.embedding_dtype)
        service = in_passing_thread(lambda: ChatService.start(engine, cache, data_dir, settings, Seed.shipped()))
        if service.scheduler is not None:  # its thread alone computes on several cores, as in app.py
            service.scheduler.wait_warm()
        prefixes = engine.prefixes
        warmed = prefixes.snapshot() if prefixes is not None else None
        def as_after_start() -> None:
            if prefixes is not None:
                prefixes.restore(warmed)
        by_question = {answer.question: answer.group for answer in staff}
        approved = cache.list_entries(review="approved", limit=10_000).entries
        group_of_entry = {entry.id: by_question.get(entry.question, "?") for entry in approved}
        firsts = {q.group: group_questions(load_questions())[q.group][0] for q in reworded}
        for first in firsts.values():  # "the groups' first wordings answered", as customers asked them
            reply = service.ask(first.question)
            if args.approve_own and reply.stats.grounding:
                approve_own_reply(service, reply.stats.grounding[0].id, reply.id)
        baselines = not args.copy_only
        served = [serve(service, q, True, group_of_entry, baselines, as_after_start) for q in reworded]
        served += [serve(service, q, False, group_of_entry, baselines, as_after_start) for q in novel]
        cache.close()
    body = (f"{summary(served, not args.copy_only)}\n\nReplies of at most {args.max_new_tokens} tokens; "
            f"{len(firsts)} first wordings answered first; the {args.half} half of the groups; approved answers "
            f"placed as `{args.layout}`; {WARM_NOTES[args.cold]}"
            f"{OWN_NOTE if args.approve_own else ''}{'; times not measured (--copy-only)' if args.copy_only else ''}.")
    if not args.copy_only:
        torch.set_num_threads(args.threads)  # no decode is timed any more
        embedder = Embedder.named(args.embedding_model, settings.embedding_dtype)
        _, _, points, _ = measure_retrieval(0, embedder, settings.for_embedder(embedder.name))
        body += ("\n\n### Retrieval alone over the threshold (all held-out rewordings, no confirmed wordings, no "
                 f"decoding)\n\n{curve_table(points)}")
    print(write_side_run(args.out, "The service workload", engine.describe(), body, "report.md", "served.json",
                         [asdict(s) for s in served]))


if __name__ == "__main__":
    main()
