"""A 702-token prefill (q4 engine, dense kernel prefill, no prefix cache) timed 4 times in a thread of its own
("own") or on a Scheduler's thread, after the main thread did one of: nothing ("sched2"), torch.set_num_threads(1)
("sched", as app.py did), torch.set_num_threads(1) then (2) ("sched_12"), torch.set_num_threads(1) from another
thread ("sched_other"), or only its own OpenMP setting to 1 through libgomp ("sched_omp2", as
decoding/threads.one_core_here does). From the repository root:
    python docs/service/2026-12-02-threads/scheduler_prefill.py MODE
"""
import sys, time, torch, threading
sys.path.insert(0, ".")
from bench.methods import app_engine
from decoding import in_passing_thread
from decoding.packed import PackedRunner
from decoding.scheduler import Scheduler
from decoding.steps import sized_steps
torch.set_num_threads(2)
engine = in_passing_thread(lambda: app_engine(prefix_cache_bytes=0))
st = sized_steps(8, 702, 128, False, 64, True)
ids = list(range(1000, 1702))
mode = sys.argv[1]
if mode == "own":
    def body():
        torch.get_num_threads(); torch.set_num_threads(2)
        for _ in range(4):
            r = PackedRunner(engine.model, st); t = time.perf_counter(); r.prefill(ids); print("own", round(time.perf_counter() - t, 3), flush=True)
    th = threading.Thread(target=body); th.start(); th.join()
else:
    sch = in_passing_thread(lambda: Scheduler(engine.model, max_slots=1)) if mode != "sched3" else Scheduler(engine.model, max_slots=1)
    if mode == "sched":
        torch.set_num_threads(1)
    if mode == "sched_12":
        torch.set_num_threads(1); torch.set_num_threads(2)
    if mode == "sched_other":
        th = threading.Thread(target=lambda: (torch.get_num_threads(), torch.set_num_threads(1))); th.start(); th.join()
    if mode == "sched_omp2":
        import ctypes, os
        torch.get_num_threads()
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp.so.1"))
        lib.omp_set_num_threads(1)
        print("main now", torch.get_num_threads())
    if mode == "sched_omp":
        import ctypes
        path = next(l.split()[-1] for l in open("/proc/self/maps") if "libgomp" in l)
        ctypes.CDLL(path).omp_set_num_threads(1)
        print("omp via", path, "main now", torch.get_num_threads())
    if mode == "sched_mkl":
        print("mkl", torch.backends.mkl.is_available(), torch.__config__.parallel_info().replace("\n", " | "))
    for _ in range(4):
        r = PackedRunner(engine.model, st); t = time.perf_counter(); sch.prefill(r.prefill_steps(ids)); print("sched", round(time.perf_counter() - t, 3), flush=True)
