"""Tune the adaptive copy policy offline: record greedy replies once, then replay LLMA for many settings.

    python -m bench.tune record --groups 8 --out var/tuning.jsonl   # runs the model (minutes)
    python -m bench.tune search --records var/tuning.jsonl          # replays only (seconds)

The replay makes exactly the decisions the real loop makes; time is priced with a cost curve. Prompts and
references are the bench's own (bench.workloads), so the tuner sees what `python -m bench` measures.
"""

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import methods
from bench.workloads import Retrieval, Selection, prepare_workloads
from data import group_questions, load_questions

# Measured for SmolLM2-135M on this 2-core machine (fp32, 2 threads, OpenMP default wait policy, quiet),
# seconds by tokens per forward.
CURVE = methods.cost_curve((1, 2, 4, 8, 16, 32, 64), (0.056, 0.094, 0.094, 0.095, 0.108, 0.135, 0.199))
EOS_TOKEN_ID = 2  # SmolLM2's <|im_end|>: the recorded replies stop there

# A recorded line's kind for each bench workload: a paraphrase with cached answers, nothing useful cached,
# asked again. Written in this order.
KIND_OF_WORKLOAD = {"repeat": "repeat", "cache_assisted": "cache", "novel": "novel"}
KINDS = ("cache", "novel", "repeat")


def tuning_selection(groups: int) -> Selection:
    """The first `groups` paraphrase groups (and half as many single-wording ones) of the shipped questions."""
    grouped = group_questions(load_questions())
    paraphrases = [g for g in grouped.values() if len(g) > 1][:groups]
    novel = [g[0] for g in grouped.values() if len(g) == 1][: max(groups // 2, 1)]
    return Selection(
        cache_assisted=[q for g in paraphrases for q in g[1:] if not q.follow_up], rag=[],
        repeat=[g[0] for g in paraphrases], followup=[], novel=novel, groups=grouped,
    )


def record(groups: int, out: Path, max_new_tokens: int) -> None:
    """One JSON line per repeat, cache-assisted and novel question: prompt, greedy reply, references."""
    decoder = methods.Decoder.load(max_new_tokens)
    workloads = prepare_workloads(decoder, tuning_selection(groups), articles={}, retrieval=Retrieval(k=4))
    with out.open("w") as f:
        for workload, kind in KIND_OF_WORKLOAD.items():
            for item in workloads.items[workload]:
                greedy = decoder.greedy(item.prompt_ids).tokens
                line = {"kind": kind, "prompt": item.prompt_ids, "greedy": greedy, "refs": item.references}
                f.write(json.dumps(line) + "\n")


@dataclass(frozen=True)
class Modeled:
    speedup: float  # summed modeled greedy seconds over summed modeled LLMA seconds
    worst: float  # the least per-question speedup


def modeled_speedup(records: list[dict], kind: str, policy) -> Modeled:
    """Aggregate and worst per-question modeled speedup over greedy for one kind of question."""
    greedy_s = llma_s = 0.0
    worst = float("inf")
    for r in (r for r in records if r["kind"] == kind):
        replay = methods.replay(r["prompt"], r["refs"], r["greedy"], policy, CURVE, EOS_TOKEN_ID)
        greedy_s, llma_s = greedy_s + replay.modeled_greedy_seconds, llma_s + replay.modeled_seconds
        worst = min(worst, replay.speedup)
    return Modeled(greedy_s / max(llma_s, 1e-9), worst)


@dataclass(frozen=True)
class Trial:
    priors: dict  # AdaptiveCopyPolicy's prior settings
    by_kind: dict[str, Modeled]


GRID = {
    "prior_by_match_len": [(0.25, 0.4, 0.55, 0.65, 0.75, 0.8), (0.35, 0.5, 0.6, 0.7, 0.8, 0.85),
                           (0.5, 0.6, 0.7, 0.8, 0.85, 0.9)],
    "prior_continuing": [0.8, 0.9],
    "prior_strength": [4.0, 8.0, 16.0],
    "min_gain": [1.0, 1.05],
    "run_weight": [0.0, 1.0],
}


def search(records_file: Path) -> None:
    records = [json.loads(line) for line in records_file.open()]
    for name, policy in [("default", methods.adaptive_policy(CURVE)), ("paper n=1 k=15", methods.paper_policy())]:
        print(name, {k: [round(m.speedup, 2), round(m.worst, 2)] for k, m in tried(records, policy).items()})
    trials = []
    for values in itertools.product(*GRID.values()):
        priors = dict(zip(GRID, values, strict=True))
        trials.append(Trial(priors, tried(records, methods.adaptive_policy(CURVE, **priors))))
    # Best cache-assisted speedup among settings that keep every novel question at >= 0.95x of greedy.
    safe = [t for t in trials if t.by_kind["novel"].worst >= 0.95]
    for trial in sorted(safe, key=lambda t: -t.by_kind["cache"].speedup)[:5]:
        print(" ".join(f"{kind} {m.speedup:.2f} (worst {m.worst:.2f})" for kind, m in trial.by_kind.items()),
              tuple(trial.priors.values()))


def tried(records: list[dict], policy) -> dict[str, Modeled]:
    return {kind: modeled_speedup(records, kind, policy) for kind in KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["record", "search"])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", "--records", dest="path", type=Path, default=Path("var/tuning.jsonl"))
    args = parser.parse_args()
    if args.command == "record":
        torch.set_num_threads(args.threads)
        args.path.parent.mkdir(parents=True, exist_ok=True)
        record(args.groups, args.path, args.max_new_tokens)
    else:
        search(args.path)


if __name__ == "__main__":
    main()
