"""The layer products alone, q4 (the lane library's product) against int4 (PyTorch's kernel): one forward's worth
(30 layers of the bundled model's shapes, random weights) at 1-32 rows, 2 threads, the fastest of five passes.

    python docs/concurrency/2026-12-02-epyc-q4/products.py   # from the repository root
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from decoding.weights import int4_weight, q4_weight  # noqa: E402

# q/k/v stacked, o, gate/up stacked, down: (outputs, inputs) of SmolLM2-135M's layers
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
LAYERS = 30


def products_ms(weights: list, rows: int) -> float:
    xs = {k: torch.randn(rows, k).to(torch.bfloat16) for _, k in SHAPES}
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(LAYERS):
            for weight, (_, k) in zip(weights, SHAPES, strict=True):
                weight(xs[k])
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    dense = [(torch.randn(n, k) * 0.05).to(torch.bfloat16) for n, k in SHAPES]
    formats = {"q4": [q4_weight(w) for w in dense], "int4": [int4_weight(w) for w in dense]}
    print("rows | q4 ms | int4 ms | q4 / int4")
    for rows in (1, 2, 4, 8, 16, 24, 32):
        q4, int4 = (products_ms(formats[name], rows) for name in ("q4", "int4"))
        print(f"{rows} | {q4:.1f} | {int4:.1f} | {q4 / int4:.2f}")


if __name__ == "__main__":
    main()
