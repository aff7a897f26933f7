"""Which thread computes on several cores: one only, for as long as the service runs.

torch's CPU kernels run on OpenMP (libgomp). Each thread that starts a parallel region gets a team of its own,
kept until that thread ends, and once libgomp manages more threads than there are cores it stops letting a
team's threads spin between regions, waking them through the kernel instead. A decode step is some 200 short
regions, so that costs a lot: an int4 step of the bundled model took 12.9 ms from the thread that loaded the
model and 20-23 ms from a second thread once the first had a team (AMD EPYC, 2 cores, 2 threads each; a 64-token
prefill chunk 0.55 vs 0.9 s, plain bf16 matmuls 20% slower). The service therefore starts in a thread that
ends (`in_passing_thread`), so its team goes with it; the scheduler's thread is then the only one computing on
`threads` cores, and every thread started later (the web server's, which embed questions and pick tokens) on one.
"""

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


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

