"""Threads in tests: torch threads per model process (one per core, shared among pytest-xdist's workers), and
tasks run in threads of their own at once.

`make test` runs two workers on a 2-core machine; two threads in each, plus the app servers they start,
would make OpenMP threads wait on each other. One thread per process keeps every process at full speed.
"""

import os

from decoding import threads

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
TEST_THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))


def run_at_once(tasks: list, wait_s: float) -> list:
    """Each task (a callable) in its own thread, all started together; what each returned, or what it raised.

    Fails the test, instead of hanging it, when a task is still running after `wait_s`."""
    try:
        return threads.run_at_once(tasks, wait_s)
    except TimeoutError as timeout:
        raise AssertionError(str(timeout)) from None


def results_at_once(tasks: list, wait_s: float) -> list:
    """`run_at_once` for tasks that must all succeed: what each returned, or the first error raised, as in a loop."""
    outcomes = run_at_once(tasks, wait_s)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes
