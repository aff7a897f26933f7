"""Weight formats side by side: each format's step cost by width and greedy speed, and how often its greedy reply
equals the dense bf16 engine's, transformers' fp32 `generate` and llama.cpp's on the same GGUF file.

    python -m bench.formats [--questions 16] [--max-new-tokens 64] [--out results/formats]

All run plain greedy (no repetition rule) on the same chat prompts, so replies compare token for token.
A format's reply differing from another engine's is no LLMA mismatch: LLMA is checked against greedy in the
same format by the main bench and the tests.
"""

import argparse
import importlib.util
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bench.markdown import fmt, table, write_side_run
from chatbot.warm import common_prefix
from data import load_questions
from decoding import StepConfig, build_engine, greedy_generate, load_model, measure_cost_curve, pick_dtype
from decoding.cost_model import weight_formats
from decoding.model_loading import DEFAULT_MODEL_DIR, bundled_gguf_path

WIDTHS = (1, 2, 4, 8)


@dataclass
class Replies:
    """One engine's greedy replies to the questions, and the seconds they took (prefill included)."""

    name: str
    tokens: list[list[int]]
    seconds: float
    step_ms: dict[int, float]  # the packed forward's step by width (empty for the peers)
    width: int | None = None  # the width "auto" chose for this format

    @property
    def tokens_per_s(self) -> float:
        return sum(map(len, self.tokens)) / self.seconds if self.seconds else 0.0


def chat_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first wording of each question group and the novel questions, as chat prompts."""
    seen, questions = set(), []
    for q in load_questions():
        if q.group not in seen:
            seen.add(q.group)
            questions.append(q.question)
    step = max(1, len(questions) // count)  # spread over the groups, not the first few topics
    chosen = questions[::step][:count]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                          return_dict=True)["input_ids"] for q in chosen]


def run_format(model, tokenizer, weights: str, prompts: list[list[int]], max_new_tokens: int) -> Replies:
    engine = build_engine(model, tokenizer, "bundled", weights=weights)  # its width measured, as "auto" does
    step_ms = {w: 1000 * measure_cost_curve(engine.model, steps=StepConfig(w, 512)).seconds[0] for w in WIDTHS}
    eos, tokens = tokenizer.eos_token_id, []
    start = time.perf_counter()
    for prompt in prompts:
        steps = engine.steps(len(prompt), max_new_tokens)
        tokens.append(greedy_generate(engine.model, prompt, max_new_tokens, eos, steps=steps).tokens)
    replies = Replies(weights, tokens, time.perf_counter() - start, step_ms, engine.step_width)
    print(f"{weights}: width {engine.step_width}, {replies.tokens_per_s:.1f} tok/s", flush=True)
    return replies


@torch.inference_mode()
def run_transformers(prompts: list[list[int]], eos: int, max_new_tokens: int) -> Replies:
    model, _ = load_model(dtype=torch.float32)
    tokens = []
    start = time.perf_counter()
    for prompt in prompts:
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=eos, pad_token_id=eos)
        tokens.append(out[0, len(prompt):].tolist())
    return Replies("transformers fp32 generate", tokens, time.perf_counter() - start, {})


def run_llama_cpp(prompts: list[list[int]], eos: int, max_new_tokens: int) -> Replies | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    from bench.peers import LlamaCppGreedy

    peer = LlamaCppGreedy(bundled_gguf_path(), torch.get_num_threads())
    peer.generate(prompts[0], 4, eos)  # warm up
    start = time.perf_counter()
    tokens = [peer.generate(prompt, max_new_tokens, eos) for prompt in prompts]
    return Replies(f"llama.cpp {peer.version} (Q4_1 GGUF)", tokens, time.perf_counter() - start, {})


def agreement(ours: Replies, theirs: Replies | None) -> tuple[float | None, float | None]:
    """Share of replies equal token for token, and the mean share of a reply before the first difference."""
    if theirs is None:
        return None, None
    equal = sum(a == b for a, b in zip(ours.tokens, theirs.tokens, strict=True)) / len(ours.tokens)
    prefix = [common_prefix(a, b) / max(len(a), 1) for a, b in zip(ours.tokens, theirs.tokens, strict=True)]
    return equal, sum(prefix) / len(prefix)


def report(formats: list[Replies], hf: Replies, peer: Replies | None, questions: int, max_new_tokens: int) -> str:
    dense = formats[0]
    header = ["engine", "chosen width", *[f"{w}-row step" for w in WIDTHS], "greedy tok/s",
              "= dense bf16", "= transformers fp32", "= llama.cpp", "prefix = llama.cpp"]
    rows = []
    for replies in [*formats, hf, *([peer] if peer else [])]:
        vs_dense, vs_hf, vs_peer = agreement(replies, dense), agreement(replies, hf), agreement(replies, peer)
        steps = [fmt(replies.step_ms.get(w), ".1f", " ms") for w in WIDTHS]
        rows.append([replies.name, str(replies.width or "–"), *steps, fmt(replies.tokens_per_s, ".1f"),
                     fmt(vs_dense[0], ".0%"), fmt(vs_hf[0], ".0%"), fmt(vs_peer[0], ".0%"), fmt(vs_peer[1], ".0%")])
    return (
        f"{questions} questions (the first wording of groups spread over the shipped set), plain greedy, at most "
        f"{max_new_tokens} new tokens, chat prompts without an article. Steps: one packed forward of that many rows "
        "over a 256-token cache, the fastest of 5. `= X`: share of replies equal to X's token for token; "
        "`prefix = llama.cpp`: mean share of a reply before its first token unlike llama.cpp's.\n\n"
        + table(header, rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.formats", description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("results/formats"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(dtype=pick_dtype("auto", "cpu"))
    prompts = chat_prompts(tokenizer, args.questions)
    eos = tokenizer.eos_token_id
    formats = [run_format(model, tokenizer, f, prompts, args.max_new_tokens) for f in weight_formats(model)]
    hf = run_transformers(prompts, eos, args.max_new_tokens)
    peer = run_llama_cpp(prompts, eos, args.max_new_tokens)
    body = report(formats, hf, peer, len(prompts), args.max_new_tokens)
    line = f"the bundled model ({DEFAULT_MODEL_DIR.name}) in {model.dtype}, packed forward, each weight format"
    print(write_side_run(args.out, "Weight formats", line, body, "formats.md", "replies.json",
                         [asdict(r) for r in [*formats, hf, *([peer] if peer else [])]]))


if __name__ == "__main__":
    main()
