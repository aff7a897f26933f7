"""q4 weights (the lane library's product) against int4 (PyTorch's kernel), alternating in one process: 8 customers
asking 4 questions each in a row, batched and one after another, and one customer asking 4 (three rounds each).
The formats round differently, so their replies differ; tokens/s is over each side's own replies.

    python docs/concurrency/2026-12-02-epyc-q4/weights_ab.py   # from the repository root
"""

import statistics
import sys
from collections import OrderedDict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import concurrency  # noqa: E402
from bench.methods import app_engine  # noqa: E402
from chatbot import ChatSettings  # noqa: E402
from decoding import in_passing_thread  # noqa: E402

EACH = 4


def main() -> None:
    torch.set_num_threads(2)
    engines = {name: in_passing_thread(lambda name=name: app_engine(name)) for name in ("q4", "int4")}
    for engine in engines.values():
        print(engine.describe())
    settings = ChatSettings.decoding_only(max_new_tokens=256, warm_prefixes=True)
    warmed: OrderedDict = OrderedDict()  # the prefills' chunks: dense on both sides, the same bits
    questions = concurrency.distinct_questions(64)[: 8 * EACH]
    rates: dict[str, list[float]] = {}
    p95: dict[str, list[float]] = {}
    for _ in range(3):
        for name, engine in engines.items():
            for customers, mode in [(8, "batched"), (8, concurrency.ONE_AT_A_TIME), (1, "batched")]:
                asked = questions[: customers * EACH]
                r = concurrency.run_round(engine, customers, mode, asked, settings, 2, warmed, EACH)
                key = f"{name}, {customers} customers {mode}"
                rates.setdefault(key, []).append(round(r.tokens / r.seconds, 1))
                p95.setdefault(key, []).append(round(r.percentile(0.95), 1))
    for key, values in rates.items():
        print(f"{key}: median {statistics.median(values):.1f} tokens/s {values}, p95 latency {p95[key]} s")


if __name__ == "__main__":
    main()
