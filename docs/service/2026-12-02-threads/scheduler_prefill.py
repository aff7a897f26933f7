"""A 702-token prefill (the engine `make run` picks, no prefix cache) timed 4 times, in a thread of its own ("own")
or on a Scheduler's thread after the main thread did one of: nothing ("nothing"), torch.set_num_threads(1) ("torch",
as app.py did), torch.set_num_threads(1) then (2) ("torch-1-2"), torch.set_num_threads(1) from another thread
("torch-elsewhere"), or one_core_here, its own OpenMP setting only ("own-setting", as app.py does now).

    python docs/service/2026-12-02-threads/scheduler_prefill.py MODE
"""

import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.methods import app_engine  # noqa: E402
from decoding import in_passing_thread  # noqa: E402
from decoding.packed import PackedRunner  # noqa: E402
from decoding.scheduler import Scheduler  # noqa: E402
from decoding.steps import sized_steps  # noqa: E402
from decoding.threads import one_core_here  # noqa: E402

PROMPT = list(range(1000, 1702))


def main(mode: str) -> None:
    torch.set_num_threads(2)
    engine = in_passing_thread(lambda: app_engine(prefix_cache_bytes=0))
    steps = sized_steps(8, len(PROMPT), 128, False, 64, True)
    if mode == "own":
        def prefills() -> None:
            torch.get_num_threads()
            torch.set_num_threads(2)
            for _ in range(4):
                start = time.perf_counter()
                PackedRunner(engine.model, steps).prefill(PROMPT)
                print(f"own thread {time.perf_counter() - start:.3f} s", flush=True)
        thread = threading.Thread(target=prefills)
        thread.start()
        thread.join()
        return
    scheduler = in_passing_thread(lambda: Scheduler(engine.model, max_slots=1))
    if mode == "torch":
        torch.set_num_threads(1)
    elif mode == "torch-1-2":
        torch.set_num_threads(1)
        torch.set_num_threads(2)
    elif mode == "torch-elsewhere":
        in_passing_thread(lambda: (torch.get_num_threads(), torch.set_num_threads(1)))
    elif mode == "own-setting":
        one_core_here()
    for _ in range(4):
        start = time.perf_counter()
        scheduler.prefill(PackedRunner(engine.model, steps).prefill_steps(PROMPT))
        print(f"scheduler, main thread {mode}: {time.perf_counter() - start:.3f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
