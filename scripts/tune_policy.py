"""Tune the adaptive copy policy offline: record greedy replies once, then replay LLMA for many settings.

    python scripts/tune_policy.py record --groups 8 --out var/tuning.jsonl   # runs the model (minutes)
    python scripts/tune_policy.py search --records var/tuning.jsonl          # replays only (seconds)

The replay (decoding.simulate) makes exactly the decisions the real loop makes; time is priced with a cost curve.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decoding import AdaptiveCopyPolicy, CostCurve, FixedCopyPolicy, LlmaOptions  # noqa: E402
from decoding.simulate import simulate_llma  # noqa: E402

# Measured for SmolLM2-135M on this 2-core machine (fp32, 2 threads, OpenMP default wait policy, quiet),
# seconds by tokens per forward.
CURVE = CostCurve((1, 2, 4, 8, 16, 32, 64), (0.056, 0.094, 0.094, 0.095, 0.108, 0.135, 0.199))


KINDS = ("cache", "novel", "repeat")  # a paraphrase with cached answers, nothing useful cached, asked again


def record(groups: int, out: Path, max_new_tokens: int) -> None:
    """Greedy replies for the cache-assisted workload (first wordings answer, later ones ask) and novel ones."""
    import numpy as np

    from cache import Embedder
    from chatbot.prompt import DEFAULT_SYSTEM_PROMPT, build_prompt
    from data import group_questions, load_questions
    from decoding import greedy_generate, load_model

    model, tok = load_model(threads=2)
    embedder = Embedder.load()
    grouped = list(group_questions(load_questions()).values())
    paraphrases = [g for g in grouped if len(g) > 1][:groups]
    novel = [g[0] for g in grouped if len(g) == 1][: max(groups // 2, 1)]

    def answer(question: str) -> tuple[list[int], list[int]]:
        ids = build_prompt(tok, DEFAULT_SYSTEM_PROMPT, None, [], question, 2048).ids
        return ids, greedy_generate(model, ids, max_new_tokens, tok.eos_token_id).tokens

    firsts = [(g[0].question, *answer(g[0].question)) for g in paraphrases]  # (question, prompt, greedy reply)
    vectors = embedder.embed([q for q, _, _ in firsts])

    def references(question: str) -> list[list[int]]:
        scores = vectors @ embedder.embed([question])[0]
        return [firsts[i][2] for i in np.argsort(-scores)[:4] if scores[i] >= 0.5]

    asked = [("cache", q) for g in paraphrases for q in g[1:] if not q.follow_up] + [("novel", q) for q in novel]
    with out.open("w") as f:
        for _, ids, greedy in firsts:  # asked again verbatim: its own reply is the reference
            f.write(json.dumps({"kind": "repeat", "prompt": ids, "greedy": greedy, "refs": [greedy]}) + "\n")
        for kind, item in asked:
            ids, greedy = answer(item.question)
            line = {"kind": kind, "prompt": ids, "greedy": greedy, "refs": references(item.question)}
            f.write(json.dumps(line) + "\n")


def modeled_speedup(records: list[dict], kind: str, policy) -> tuple[float, float]:
    """Aggregate and worst per-question modeled speedup over greedy for one workload."""
    greedy_s = llma_s = 0.0
    worst = float("inf")
    for r in (r for r in records if r["kind"] == kind):
        sim = simulate_llma(r["prompt"], r["refs"], r["greedy"], policy, CURVE, LlmaOptions(eos_token_id=2))
        greedy_s, llma_s = greedy_s + sim.modeled_greedy_seconds, llma_s + sim.modeled_seconds
        worst = min(worst, sim.speedup)
    return greedy_s / max(llma_s, 1e-9), worst


def search(records_file: Path) -> None:
    records = [json.loads(line) for line in records_file.open()]
    for name, policy in [("default", AdaptiveCopyPolicy(cost=CURVE)), ("paper n=1 k=15", FixedCopyPolicy(1, 15))]:
        print(name, {k: [round(x, 2) for x in modeled_speedup(records, k, policy)] for k in KINDS})
    grid = itertools.product(
        [(0.25, 0.4, 0.55, 0.65, 0.75, 0.8), (0.35, 0.5, 0.6, 0.7, 0.8, 0.85), (0.5, 0.6, 0.7, 0.8, 0.85, 0.9)],
        [0.8, 0.9], [4.0, 8.0, 16.0], [1.0, 1.05], [0.0, 1.0],
    )
    rows = []
    for priors, continuing, strength, gain, run_weight in grid:
        policy = AdaptiveCopyPolicy(CURVE, prior_by_match_len=priors, prior_continuing=continuing,
                                    prior_strength=strength, min_gain=gain, run_weight=run_weight)
        speeds = [x for kind in KINDS for x in modeled_speedup(records, kind, policy)]
        rows.append((*speeds, priors, continuing, strength, gain, run_weight))
    # Best cache-assisted speedup among settings that keep every novel question at >= 0.95x of greedy.
    for row in sorted((r for r in rows if r[3] >= 0.95), key=lambda r: -r[0])[:5]:
        print("cache {:.2f} (worst {:.2f}) novel {:.2f} (worst {:.2f}) repeat {:.2f} (worst {:.2f})".format(*row[:6]),
              row[6:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["record", "search"])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", "--records", dest="path", type=Path, default=Path("var/tuning.jsonl"))
    args = parser.parse_args()
    if args.command == "record":
        args.path.parent.mkdir(parents=True, exist_ok=True)
        record(args.groups, args.path, args.max_new_tokens)
    else:
        search(args.path)
