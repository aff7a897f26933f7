"""Torch threads for every model process of a test run: one per core, shared among pytest-xdist's workers.

`make test` runs two workers on a 2-core machine; two threads in each, plus the app servers they start,
would make OpenMP threads wait on each other. One thread per process keeps every process at full speed.
"""

import os

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
TEST_THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))
