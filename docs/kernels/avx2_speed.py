"""The bundled model on the lane library's native build against its AVX2 build (CHATBOT_KERNEL_ISA=avx2), side by
side in one run: one forward of 1 and 8 rows over a 256-token cache, 8 replies' rows in one forward, and greedy
tokens/s on a few help-centre questions. Each build runs in its own process (a process loads one build), the
configurations taking turns, ROUNDS times, the best of each kept (others' work only ever adds time); "avx2, torch
capped" also holds PyTorch's own kernels to AVX2 (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), nearer what an
AVX2-only CPU runs.

    python docs/kernels/avx2_speed.py            # q4 weights (bf16) and dense float32, 2 threads
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from decoding.lane_kernel import ISA_VARIABLE, kernel_paths  # noqa: E402

CONFIGS = {
    "native": {},
    "avx2": {ISA_VARIABLE: "avx2"},
    "avx2, torch capped": {ISA_VARIABLE: "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
FORMATS = {"q4": torch.bfloat16, "dense": torch.float32}
SHAPES = [(1, 1), (1, 8), (8, 1)]  # (lanes, rows a lane) of one forward
CONTEXT, REPEATS, QUESTIONS, MAX_NEW_TOKENS, ROUNDS = 256, 20, 4, 80, 2


def forward_ms(model, lanes: int, rows: int) -> float:
    """The fastest of three runs of REPEATS forwards, each lane `rows` new tokens over CONTEXT keys of its own."""
    from decoding.packed import Lane

    caches = [model.new_cache(512) for _ in range(lanes)]
    batch = [Lane(torch.tensor([5 + j] * rows), CONTEXT, caches[j], CONTEXT + rows) for j in range(lanes)]
    best = float("inf")
    for _ in range(3):
        model.forward_lanes(batch)  # warm
        start = time.perf_counter()
        for _ in range(REPEATS):
            model.forward_lanes(batch)
        best = min(best, (time.perf_counter() - start) / REPEATS * 1000)
    return best


def greedy_speed(model, tokenizer) -> tuple[float, list[list[int]]]:
    """Greedy tokens/s over QUESTIONS questions (prefill included, the best of two passes), and the replies."""
    from decoding import greedy_generate
    from decoding.steps import PREFILL_CHUNK, sized_steps

    lines = (ROOT / "data" / "questions.jsonl").read_text().splitlines()
    questions = [json.loads(line)["question"] for line in lines[:: len(lines) // QUESTIONS][:QUESTIONS]]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"] for q in questions]
    best, replies = 0.0, []
    for _ in range(2):
        tokens, start, replies = 0, time.perf_counter(), []
        for ids in prompts:
            steps = sized_steps(8, len(ids), MAX_NEW_TOKENS, padded=False, prefill_chunk=PREFILL_CHUNK,
                                cross_granules=True)
            reply = greedy_generate(model, ids, MAX_NEW_TOKENS, tokenizer.eos_token_id, steps=steps).tokens
            tokens, replies = tokens + len(reply), [*replies, reply]
        best = max(best, tokens / (time.perf_counter() - start))
    return best, replies


def child(weights: str) -> None:
    from decoding.model_loading import load_model
    from decoding.packed import PackedLlama

    torch.set_num_threads(2)
    source, tokenizer = load_model(dtype=FORMATS[weights])
    model = PackedLlama(source, weights=weights, prefix_cache_bytes=0)
    assert model.lane_kernel, "the lane library did not build"
    result = {f"{lanes}x{rows}": forward_ms(model, lanes, rows) for lanes, rows in SHAPES}
    result["tokens/s"], result["replies"] = greedy_speed(model, tokenizer)
    head = ", lane head" if model.packing.lane_head else ""
    result["paths"], result["torch"] = kernel_paths() + head, torch.backends.cpu.get_cpu_capability()
    print(json.dumps(result))


def best_of(old: dict | None, new: dict) -> dict:
    """The fastest of two runs of one configuration, figure by figure; their replies must agree."""
    if old is None:
        return new
    assert old["replies"] == new["replies"], "one build decoded two different replies"
    best = {shape: min(old[shape], new[shape]) for shape in (f"{lanes}x{rows}" for lanes, rows in SHAPES)}
    return {**new, **best, "tokens/s": max(old["tokens/s"], new["tokens/s"])}


def main() -> None:
    from decoding.hardware import cpu_features

    print(f"CPU: {cpu_features().model_name} ({', '.join(cpu_features().flags)}), 2 threads, torch {torch.__version__}")
    print("\n| weights | build | kernel paths | torch | 1 row ms | 8 rows ms | 8 rows / 1 | 8 replies x 1 row ms "
          "| greedy tokens/s | replies as native |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for weights in FORMATS:
        runs: dict[str, dict] = {}
        for _ in range(ROUNDS):
            for name, env in CONFIGS.items():
                out = subprocess.run([sys.executable, __file__, "--child", weights], env={**os.environ, **env},
                                     capture_output=True, text=True, check=True).stdout
                runs[name] = best_of(runs.get(name), json.loads(out.strip().splitlines()[-1]))
        for name, r in runs.items():
            same = r["replies"] == runs["native"]["replies"]
            print(f"| {weights} ({str(FORMATS[weights]).removeprefix('torch.')}) | {name} | {r['paths']} | "
                  f"{r['torch']} | {r['1x1']:.1f} | {r['1x8']:.1f} | {r['1x8'] / r['1x1']:.2f}x | {r['8x1']:.1f} | "
                  f"{r['tokens/s']:.1f} | {'yes' if same else 'no'} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main()
