"""Batched, 8 customers at once: replies weighing their drafts by their share of the shared forward, against
drafting as alone, alternating in one process (six rounds each).

    python docs/concurrency/2026-12-02-epyc-w8-company/drafting_ab.py   # from the repository root
"""

import sys
from collections import OrderedDict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import concurrency  # noqa: E402
from bench.methods import app_engine  # noqa: E402
from chatbot import ChatSettings  # noqa: E402
from decoding import in_passing_thread  # noqa: E402
from decoding import policy as policies  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    engine = in_passing_thread(lambda: app_engine("auto"))
    print(engine.describe())
    settings = ChatSettings.decoding_only(max_new_tokens=256, warm_prefixes=True)
    warmed: OrderedDict = OrderedDict()
    questions = concurrency.distinct_questions(16)[-8:]
    weighed = policies.SharedForwardPolicy.start
    rates: dict[str, list[float]] = {}
    for _ in range(6):
        for name, start in [("company-aware", weighed), ("as alone", lambda self: self.policy.start())]:
            policies.SharedForwardPolicy.start = start
            r = concurrency.run_round(engine, 8, "batched", questions, settings, 2, warmed)
            rates.setdefault(name, []).append(round(r.tokens / r.seconds, 1))
    policies.SharedForwardPolicy.start = weighed
    print(rates)


if __name__ == "__main__":
    main()
