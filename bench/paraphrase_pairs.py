"""Ask paraphrase pairs through ChatService and set each second reply's stats beside verify()'s measurement.

    python -m bench.paraphrase_pairs [--pairs 5] [--max-new-tokens 128]
"""

import argparse
import tempfile

import torch

from chatbot import ChatService, ChatSettings
from data import group_questions, load_questions


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paraphrase_pairs")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(2)
    groups = [g for g in group_questions(load_questions()).values() if len(g) > 1][: args.pairs]
    with tempfile.TemporaryDirectory() as data_dir:
        svc = ChatService.create(data_dir, settings=ChatSettings.decoding_only(max_new_tokens=args.max_new_tokens))
        print("| second question | tokens | copied | passes | estimated speedup | verify: identical | measured |")
        print("|---|---|---|---|---|---|---|")
        for group in groups:
            svc.ask(group[0].question)
            second = svc.ask(group[1].question)
            check = svc.verify(second.id)
            s = second.stats
            print(f"| {group[1].question[:60]} | {s.tokens} | {s.copied_tokens} | {s.forward_passes} | "
                  f"{s.speedup:.2f}x | {check.identical} | {check.measured_speedup:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
