"""Which dtype and weight formats should an AVX2-only CPU decode in? On the lane library's AVX2 build with
PyTorch's own kernels held to AVX2 too (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA: what such a CPU runs), side by
side in one run: a prompt of PROMPT_TOKENS prefilled (a help article and a question are about that long), one
forward of 1 and 8 rows over a 256-token cache, and greedy tokens/s on a few help-centre questions.

    python docs/kernels/avx2_formats.py
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
sys.path.insert(0, str(ROOT / "docs" / "kernels"))

from avx2_speed import forward_ms, greedy_speed  # noqa: E402

from decoding.lane_kernel import ISA_VARIABLE, kernel_paths  # noqa: E402

CAPPED = {ISA_VARIABLE: "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# (activations, decode weights, prefill weights)
RECIPES = {
    "float32, dense": ("float32", "dense", "dense"),
    "bfloat16, q4, dense prefill": ("bfloat16", "q4", "dense"),
    "bfloat16, q4, q4 prefill": ("bfloat16", "q4", "q4"),
    "bfloat16, int8": ("bfloat16", "int8", "int8"),
}
PROMPT_TOKENS, ROUNDS = 480, 2


def prefill_ms(model) -> float:
    """The fastest of three prefills of PROMPT_TOKENS tokens into an empty cache, in the service's chunks."""
    from decoding.steps import PREFILL_CHUNK

    ids = torch.arange(100, 100 + PROMPT_TOKENS)
    best = float("inf")
    for _ in range(3):
        cache = model.new_cache(1024)
        start = time.perf_counter()
        for at in range(0, PROMPT_TOKENS, PREFILL_CHUNK):
            end = min(at + PREFILL_CHUNK, PROMPT_TOKENS)
            model.prefill(ids[at:end], at, cache, end, chunked=True)
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def child(name: str) -> None:
    from decoding.model_loading import load_model
    from decoding.packed import PackedLlama

    dtype, weights, prefill = RECIPES[name]
    torch.set_num_threads(2)
    source, tokenizer = load_model(dtype=getattr(torch, dtype))
    model = PackedLlama(source, weights=weights, prefill_weights=prefill, prefix_cache_bytes=0)
    result = {"prefill": prefill_ms(model), "1x1": forward_ms(model, 1, 1), "1x8": forward_ms(model, 1, 8)}
    result["tokens/s"], _ = greedy_speed(model, tokenizer)
    result["paths"], result["torch"] = kernel_paths(), torch.backends.cpu.get_cpu_capability()
    print(json.dumps(result))


def main() -> None:
    from decoding.hardware import cpu_features

    print(f"CPU: {cpu_features().model_name}, 2 threads, torch {torch.__version__}, lane library and PyTorch held "
          "to AVX2")
    print(f"\n| recipe | {PROMPT_TOKENS}-token prefill ms | 1 row ms | 8 rows ms | greedy tokens/s (prefill included) "
          "| kernel paths | torch |")
    print("|---|---|---|---|---|---|---|")
    runs: dict[str, dict] = {}
    for _ in range(ROUNDS):
        for name in RECIPES:
            out = subprocess.run([sys.executable, __file__, "--child", name], env={**os.environ, **CAPPED},
                                 capture_output=True, text=True, check=True).stdout
            new = json.loads(out.strip().splitlines()[-1])
            old = runs.get(name, new)
            runs[name] = {**new, **{k: min(old[k], new[k]) for k in ("prefill", "1x1", "1x8")},
                          "tokens/s": max(old["tokens/s"], new["tokens/s"])}
    for name, r in runs.items():
        print(f"| {name} | {r['prefill']:.0f} | {r['1x1']:.1f} | {r['1x8']:.1f} | {r['tokens/s']:.1f} | "
              f"{r['paths']} | {r['torch']} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main()
