"""One shared forward's cost, lane kernel against SDPA lane by lane: lanes x rows per lane, each lane at a
~500-token context, the app's int4 packing (dense bf16 with `dense` as argument), 2 threads.

    python docs/concurrency/2026-12-02-epyc-lane-kernel/forward_costs.py [int4|dense]
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.methods import app_engine  # noqa: E402
from decoding.packed import Lane, PackedLlama  # noqa: E402

SHAPES = [(1, 1), (1, 2), (1, 8), (4, 2), (8, 1), (8, 2), (8, 4)]


def main() -> None:
    torch.set_num_threads(2)
    weights = sys.argv[1] if len(sys.argv) > 1 else "int4"
    source = app_engine(weights, prefix_cache_bytes=0).model.source
    models = {name: PackedLlama(source, 8, weights, prefix_cache_bytes=0, lane_kernel=name == "kernel")
              for name in ("kernel", "sdpa")}
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
    print(f"{weights}: lanes x rows | lane kernel ms | SDPA ms")
    for lanes, rows in SHAPES:
        print(f"{lanes} x {rows} | {best['kernel', lanes, rows]:.1f} | {best['sdpa', lanes, rows]:.1f}")


if __name__ == "__main__":
    main()
