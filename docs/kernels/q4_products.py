"""The q4 products of one forward of the bundled model's shapes (30 layers x 7 products, random weights), for 1 and
8 rows: the best of 5 runs of 10 forwards. Run it once per build to compare them:

    python docs/kernels/q4_products.py
    CHATBOT_KERNEL_ISA=avx2 python docs/kernels/q4_products.py
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from decoding.lane_kernel import kernel_paths  # noqa: E402
from decoding.weights import q4_weight  # noqa: E402

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # (out, in)
LAYERS, RUNS, FORWARDS = 30, 5, 10


def products_ms(weights: list, rows: int) -> float:
    x = {k: torch.randn(rows, k).bfloat16() for k in {k for _, k in SHAPES}}
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        for _ in range(FORWARDS * LAYERS):
            for (_, k), weight in zip(SHAPES, weights, strict=True):
                weight(x[k])
        best = min(best, (time.perf_counter() - start) / FORWARDS * 1000)
    return best


def main() -> None:
    torch.manual_seed(0)
    weights = [q4_weight((torch.randn(n, k) * 0.05).bfloat16()) for n, k in SHAPES]
    one, eight = products_ms(weights, 1), products_ms(weights, 8)
    print(f"{kernel_paths()}: 1 row {one:.2f} ms, 8 rows {eight:.2f} ms, 8 rows / 1 {eight / one:.2f}x")


if __name__ == "__main__":
    main()
