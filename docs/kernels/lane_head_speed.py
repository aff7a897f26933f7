"""The bundled model held to AVX2 (the lane library's AVX2 build, PyTorch capped: nearest an AVX2-only CPU), q4
weights, its LM head on PyTorch's bf16 product against the lane library's (decoding/csrc/head_product.cpp), in one
process, the two packings taking turns: a forward of 1 and 8 rows over a 256-token cache, 8 replies' single rows
in one forward. Medians of ROUNDS rounds, each the best of three runs of REPEATS forwards.

    python docs/kernels/lane_head_speed.py
"""

import os
import statistics
import sys
from pathlib import Path

CAPPED = {"CHATBOT_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
if any(os.environ.get(key) != value for key, value in CAPPED.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **CAPPED})

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "kernels"))

from avx2_speed import SHAPES, forward_ms  # noqa: E402

ROUNDS = 5


def main() -> None:
    from decoding.hardware import cpu_features
    from decoding.lane_kernel import kernel_paths
    from decoding.model_loading import load_model
    from decoding.packed import PackedLlama

    torch.set_num_threads(2)
    source, _ = load_model(dtype=torch.bfloat16)
    heads = {"PyTorch's bf16 head": False, "lane-library head": True}
    models = {name: PackedLlama(source, weights="q4", lane_head=lane, prefix_cache_bytes=0)
              for name, lane in heads.items()}
    times = {name: {shape: [] for shape in SHAPES} for name in models}
    for _ in range(ROUNDS):
        for name, model in models.items():
            for shape in SHAPES:
                times[name][shape].append(forward_ms(model, *shape))
    print(f"CPU: {cpu_features().model_name} ({', '.join(cpu_features().flags)}); lane library {kernel_paths()}, "
          f"torch {torch.backends.cpu.get_cpu_capability()}, 2 threads, q4 weights, medians of {ROUNDS} rounds\n")
    print("| head | 1 row ms | 8 rows ms | 8 rows / 1 | 8 replies x 1 row ms |")
    print("|---|---|---|---|---|")
    for name in models:
        one, eight, spread = (statistics.median(times[name][shape]) for shape in SHAPES)
        print(f"| {name} | {one:.1f} | {eight:.1f} | {eight / one:.2f}x | {spread:.1f} |")


if __name__ == "__main__":
    main()
