"""The lane kernel against SDPA lane by lane, alternating in one process: 8 customers at once batched, the same
8 one after another, and one customer alone (four rounds each). The two attend alike to fp32 rounding, so their
replies may differ at a near-tie; tokens/s is over each side's own replies.

    python docs/concurrency/2026-12-02-epyc-lane-kernel/kernel_ab.py   # from the repository root
"""

import statistics
import sys
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import concurrency  # noqa: E402
from bench.methods import app_engine  # noqa: E402
from chatbot import ChatSettings  # noqa: E402
from decoding import PackedLlama, in_passing_thread  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    kernel = in_passing_thread(lambda: app_engine("auto"))
    packed = kernel.model
    sdpa = replace(kernel, model=in_passing_thread(lambda: PackedLlama(
        packed.source, packed._width_hint, packed.weights, lane_kernel=False)))
    print(kernel.describe(), "|", sdpa.describe())
    settings = ChatSettings.decoding_only(max_new_tokens=256, warm_prefixes=True)
    warmed: OrderedDict = OrderedDict()  # the prefills' chunks: SDPA on both sides, the same bits
    questions = concurrency.distinct_questions(16)[-8:]
    rates: dict[str, list[float]] = {}
    for _ in range(4):
        for name, engine in [("kernel", kernel), ("sdpa", sdpa)]:
            for customers, mode in [(8, "batched"), (8, concurrency.ONE_AT_A_TIME), (1, "batched")]:
                r = concurrency.run_round(engine, customers, mode, questions[:customers], settings, 2, warmed)
                rates.setdefault(f"{name}, {customers} {mode}", []).append(round(r.tokens / r.seconds, 1))
    for key, values in rates.items():
        print(f"{key}: median {statistics.median(values):.1f} tokens/s, {values}")


if __name__ == "__main__":
    main()
