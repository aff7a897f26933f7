"""One shared forward's cost, q4 weights (the lane library's product) against int4 (PyTorch's kernel): lanes x
rows per lane, each lane at a ~500-token context, lane-kernel attention and 2 threads for both, alternating.

    python docs/concurrency/2026-12-02-epyc-q4/forward_costs.py
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.methods import app_engine  # noqa: E402
from decoding.packed import Lane, PackedLlama  # noqa: E402

SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (4, 2), (8, 1), (8, 2), (8, 3), (8, 4)]
FORMATS = ("q4", "int4")


def main() -> None:
    torch.set_num_threads(2)
    source = app_engine("dense", prefix_cache_bytes=0).model.source
    models = {name: PackedLlama(source, 8, name, prefix_cache_bytes=0) for name in FORMATS}
    caches = {name: [m.new_cache(768) for _ in range(8)] for name, m in models.items()}
    best: dict[tuple, float] = {}
    for _ in range(3):  # alternating, the fastest of three passes of 15 forwards
        for lanes, rows in SHAPES:
            for name, model in models.items():
                batch = [Lane(torch.tensor([5] * rows), 500 + 3 * j, caches[name][j], 512) for j in range(lanes)]
                for _ in range(3):
                    model.forward_lanes(batch)
                start = time.perf_counter()
                for _ in range(15):
                    model.forward_lanes(batch)
                ms = (time.perf_counter() - start) / 15 * 1000
                best[name, lanes, rows] = min(ms, best.get((name, lanes, rows), ms))
    print("lanes x rows | q4 ms | int4 ms | q4 / int4")
    for lanes, rows in SHAPES:
        q4, int4 = best["q4", lanes, rows], best["int4", lanes, rows]
        print(f"{lanes} x {rows} | {q4:.1f} | {int4:.1f} | {q4 / int4:.2f}")


if __name__ == "__main__":
    main()
