"""Reply quality at the real reply length, per decoding rule: loops, endings, length, unsupported facts.

    python -m bench.quality [--questions 8] [--skip 0] [--max-new-tokens 256] [--variants off,dry]

The shipped questions are asked through the chat service as a customer asks them (the app's prompt with its
help article and approved answer, LLMA over the cache), once per variant (a decoding rule and a prompt), each
variant on a fresh install. `--skip N` leaves out each set's first N questions: tune on one part, check on another.
First wordings go first, so their answers are cached when the rewordings come. Every reply is then rerun with
Verify (the same rule decoded one step at a time, same forward and width) and must be identical to it; Verify's
greedy time over the reply's own time is the measured speedup.
"""

import argparse
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from bench.markdown import write_side_run
from bench.methods import app_engine, decoding_rule
from bench.quality_checks import ReplyQuality, judge
from bench.workloads import round_robin
from chatbot import ChatService, ChatSettings, Seed, Verification
from chatbot.deployment import open_cache
from data import Question, group_questions, load_questions

SETS = ("first wording", "reworded", "novel")
# The instructions and layout the app had before they were measured here (issue 19).
EARLIER_PROMPT = (
    "You are the customer support assistant for Nimbus Drive, a cloud file storage and sharing service. "
    "Answer the customer's question clearly and concisely, with numbered steps when there are steps."
)
EARLIER = {"system_prompt": EARLIER_PROMPT, "prompt_layout": "system"}
# Each variant: a decoding rule (bench.methods.RULES), changes to it, and the chat settings that differ from the app's.
VARIANTS = {
    "before": ("off", {}, EARLIER),  # plain greedy on the earlier prompt: the replies before issue 19
    "off": ("off", {}, {}),  # plain greedy on the app's prompt
    "dry-earlier-prompt": ("dry", {}, EARLIER),
    "dry-earlier-prompt-turn": ("dry", {}, {"system_prompt": EARLIER_PROMPT}),
    "dry-system": ("dry", {}, {"prompt_layout": "system"}),
    "dry-no-end": ("dry", {"end_bonus": 0.0}, {}),  # DRY and the stop rule only
    "dry-end-96": ("dry", {"end_after": 96, "end_bonus": 0.05}, {}),
    "dry-end-128": ("dry", {"end_after": 128, "end_bonus": 0.1}, {}),
    "dry-free-numbers": ("dry", {"ground_numbers": False}, {}),  # the app's rule before grounded numbers
    "dry": ("dry", {}, {}),  # the app's default: DRY, the stop rule, the end bonus, grounded numbers
}


@dataclass(frozen=True)
class Asked:
    """One question asked under one rule, and what came back."""

    variant: str  # a name of VARIANTS: the decoding rule and prompt it ran under
    set: str
    question: str
    reply: str
    quality: ReplyQuality
    identical: bool | None  # equal to the rule decoded one step at a time (Verify); None: not verified
    seconds: float
    greedy_seconds: float  # Verify's rerun
    copied_share: float


def question_sets(questions: list[Question], limit: int, skip: int = 0) -> dict[str, list[str]]:
    """First wordings of groups that have rewordings, their rewordings (one per group first), single questions;
    each set's questions `skip` to `skip + limit`."""
    groups = [g for g in group_questions(questions).values() if not g[0].follow_up]
    reworded = [g for g in groups if len(g) >= 2]
    later = round_robin([[q for q in g[1:] if not q.follow_up] for g in reworded])
    cut = slice(skip, skip + limit)
    return {
        "first wording": [g[0].question for g in reworded][cut],
        "reworded": [q.question for q in later][cut],
        "novel": [g[0].question for g in groups if len(g) == 1][cut],
    }


def ask_all(service: ChatService, rule: str, sets: dict[str, list[str]], verify: bool = True) -> list[Asked]:
    asked = []
    for name, questions in sets.items():
        for question in questions:
            reply = service.ask(question)
            stored = service.cache.get_reply(reply.id)
            check = service.verify(reply.id) if verify else Verification(reply.id, None, 0.0, reply.stats.seconds, 0)
            prompt_text = service.tokenizer.decode(stored.prompt_ids, skip_special_tokens=True)
            quality = judge(reply.text, stored.token_ids, prompt_text, reply.stats.stop_reason)
            asked.append(Asked(rule, name, question, reply.text, quality, check.identical, check.reply_seconds,
                               check.greedy_seconds, reply.stats.copied_share))
            print(f"[{rule}] {name}: {quality.tokens} tokens, {quality.ended}, loops={quality.loops}, "
                  f"identical={check.identical}: {question[:60]}", flush=True)
    return asked


def run_variant(engine, variant: str, sets: dict[str, list[str]], max_new_tokens: int, verify: bool) -> list[Asked]:
    """A fresh install (the shipped articles and approved answers) decoding under `variant`."""
    rule, rule_changes, changes = VARIANTS[variant]
    rule = replace(decoding_rule(rule), **rule_changes)
    settings = ChatSettings.decoding_only(max_new_tokens=max_new_tokens, repetition=rule, **changes)
    with tempfile.TemporaryDirectory(prefix="quality-") as data_dir:
        cache = open_cache(data_dir, None, settings.max_entries, settings.embedding_model)
        service = ChatService.start(engine, cache, data_dir, settings, Seed.shipped())
        try:
            return ask_all(service, variant, sets, verify)
        finally:
            cache.close()


def table(asked: list[Asked], max_new_tokens: int) -> str:
    """One row per rule and question set."""
    lines = [
        "| variant | questions | replies | loop | ended before the limit (EOS / stop rule) | at the limit "
        "| mean tokens | copied "
        "| with an unsupported fact | unsupported facts / reply | identical to step-by-step | speedup (Verify) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rule in dict.fromkeys(a.variant for a in asked):
        for name in [*SETS, "all"]:
            rows = [a for a in asked if a.variant == rule and name in (a.set, "all")]
            if rows:
                lines.append(row(rule, name, rows))
    return "\n".join(lines) + f"\n\nReplies of at most {max_new_tokens} tokens."


def row(rule: str, name: str, rows: list[Asked]) -> str:
    n = len(rows)
    ended = [a.quality.ended for a in rows]
    share = lambda count: f"{count}/{n} ({count / n:.0%})"  # noqa: E731
    speedup = sum(a.greedy_seconds for a in rows) / max(sum(a.seconds for a in rows), 1e-9)
    return (
        f"| {rule} | {name} | {n} | {share(sum(a.quality.loops for a in rows))} "
        f"| {share(ended.count('eos') + ended.count('repetition'))} ({ended.count('eos')} / "
        f"{ended.count('repetition')}) | {share(ended.count('limit'))} "
        f"| {sum(a.quality.tokens for a in rows) / n:.0f} | {sum(a.copied_share for a in rows) / n:.0%} "
        f"| {share(sum(bool(a.quality.unsupported) for a in rows))} "
        f"| {sum(len(a.quality.unsupported) for a in rows) / n:.2f} "
        f"| {share(sum(a.identical for a in rows)) if rows[0].identical is not None else 'not checked'} "
        f"| {f'{speedup:.2f}x' if rows[0].identical is not None else 'not measured'} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=8, help="questions per set (first wording, reworded, novel)")
    parser.add_argument("--max-new-tokens", type=int, default=ChatSettings.max_new_tokens)
    parser.add_argument("--skip", type=int, default=0, help="leave out each set's first N questions")
    parser.add_argument("--variants", default="before,dry", help=f"from {', '.join(VARIANTS)}")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip the step-by-step rerun (no identity check, no measured speedup): for tuning")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("results/quality"))
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:  # fails before the model loads
        parser.error(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    torch.set_num_threads(args.threads)
    engine = app_engine(prefix_cache_bytes=0)  # a reply and its step-by-step rerun each prefill their own prompt
    print(f"Engine: {engine.describe()}", flush=True)
    sets = question_sets(load_questions(), args.questions, args.skip)
    asked = [a for variant in variants for a in run_variant(engine, variant, sets, args.max_new_tokens, args.verify)]
    print(write_side_run(args.out, "Reply quality", engine.describe(), table(asked, args.max_new_tokens),
                         "quality.md", "replies.json", [asdict(a) for a in asked]))


if __name__ == "__main__":
    main()
