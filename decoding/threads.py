"""Which thread computes on several cores: one only, for as long as the service runs.

torch's CPU kernels run on OpenMP (libgomp). Each thread that starts a parallel region gets a team of its own,
kept until that thread ends, and once libgomp manages more threads than there are cores it stops letting a
team's threads spin between regions, waking them through the kernel instead. A decode step is some 200 short
regions, so that costs a lot: an int4 step of the bundled model took 12.9 ms from the thread that loaded the
model and 20-23 ms from a second thread once the first had a team (AMD EPYC, 2 cores, 2 threads each; a 64-token
prefill chunk 0.55 vs 0.9 s, plain bf16 matmuls 20% slower). The service therefore starts in a thread that
ends (`in_passing_thread`), so its team goes with it; the scheduler's thread is then the only one computing on
`threads` cores, and every other thread that computes while it runs (the web server's, which embed questions and
pick tokens) on one (`one_core_here`).

That one core is set in the thread's own OpenMP setting, not with torch.set_num_threads(1): torch's call also
changes process-wide state, and after it the scheduler's thread, still on 2 threads, took 1.27-1.40 s to prefill a
702-token prompt against 0.74-0.81 s with only the asking thread's OpenMP setting changed (AMD EPYC, 4 runs each).
MKL, inside torch on x86, sizes its own OpenMP teams (the vector maths of the embedding model's GELU) from its own
count, not the thread's OpenMP setting, so its thread-local count goes to one as well: before, the first question
embedded in a web server thread gave that thread a team for good, and every step of the scheduler's then cost
12-14 ms instead of 5 (AMD EPYC, q4, one row; found with gdb on pthread_create).
A thread keeps its team until it ends, so the setting must come before its first torch work (the decode loop
calls it first thing too, decoding/scheduler.py).
"""

import ctypes
import logging
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

import torch

logger = logging.getLogger(__name__)
T = TypeVar("T")
_computing: set[int] = set()  # idents of the threads that compute on several cores (a scheduler's, while it runs)
_on_one_core = threading.local()


def computes_on_several_cores() -> None:
    """The calling thread computes on several cores until `stops_computing`: other threads' work goes to one."""
    _computing.add(threading.get_ident())


def stops_computing() -> None:
    _computing.discard(threading.get_ident())


def one_core_here() -> None:
    """While a thread computes on several cores (the scheduler's), the calling thread's torch work runs on one core
    from now on: its own OpenMP setting and MKL's thread-local count (the web server's threads embed questions and
    pick tokens, and serve nothing else). Elsewhere (start-up, no scheduler) nothing changes.

    Set again whenever the thread's OpenMP setting is no longer one: torch.set_num_threads in the same thread puts it
    back (bench.concurrency's main thread asked its customers after such a call, and its first embedding then gave it
    a team for good: the scheduler's steps of every later round cost twice as much, 11.6 against 5.2 ms)."""
    if not _computing or threading.get_ident() in _computing:
        return
    openmp = _torch_openmp()
    if openmp is None:
        return
    # torch sizes a new thread from its process-wide default at its first call (undoing a setting made before), so
    # that call comes first; it also says whether the thread is still on one core.
    threads = torch.get_num_threads()
    if getattr(_on_one_core, "set", False) and threads == 1:
        return
    openmp.omp_set_num_threads(1)
    mkl = _torch_mkl_threads()
    if mkl is not None:
        mkl(1)
    _on_one_core.set = True


@cache
def _torch_openmp() -> "ctypes.CDLL | None":
    """The OpenMP runtime torch computes with (libgomp, already loaded under this name), or None."""
    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError as error:
        logger.warning("no libgomp.so.1 (%s): threads that are not the scheduler's keep torch's default", error)
        return None


@cache
def _torch_mkl_threads() -> "Callable[[int], int] | None":
    """MKL's per-thread count setter in torch's own library (x86 builds link MKL in), or None without MKL."""
    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        return library.MKL_Set_Num_Threads_Local  # the C entry (by value); the lower-case names are Fortran's
    except (OSError, AttributeError):
        return None


def in_passing_thread(run: Callable[[], T]) -> T:
    """`run()` in a thread of its own that ends with it, so that its OpenMP team ends too; its result or error."""
    outcome: list = []

    def target() -> None:
        try:
            outcome.append((True, run()))
        except BaseException as error:  # raised again in the caller's thread
            outcome.append((False, error))

    thread = threading.Thread(target=target, name="start-up", daemon=True)  # Ctrl-C in the caller ends it too
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value



def run_at_once(tasks: list[Callable[[], object]], wait_s: float) -> list:
    """Each task in a daemon thread of its own, all started together; what each returned, or what it raised.
    Raises TimeoutError if one still runs after `wait_s` (a daemon thread does not keep the process from ending)."""
    outcomes: list = [None] * len(tasks)

    def run(i: int) -> None:
        try:
            outcomes[i] = tasks[i]()
        except BaseException as error:  # handed back to the caller
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(tasks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(wait_s)
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"tasks still running after {wait_s} s")
    return outcomes
