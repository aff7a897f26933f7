"""Helpers shared by the cache tests (a plain module: `from conftest import` is ambiguous across packages)."""

import threading
from collections.abc import Callable

from cache import NewAnswer


def answer(question: str, text: str = "an answer", model_id: str = "model-a", **fields) -> NewAnswer:
    """A NewAnswer with defaults for everything a test does not care about."""
    return NewAnswer(question=question, answer=text, answer_ids=[1, 2, 3], model_id=model_id, **fields)


def run_at_once(work: Callable[[int], None], count: int, wait_s: float, doing: str) -> None:
    """work(0) .. work(count - 1), each in its own thread, all started before any is awaited; fails when one is
    still `doing` after wait_s (a deadlock)."""
    threads = [threading.Thread(target=work, args=(number,), daemon=True) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(wait_s)
    assert not any(thread.is_alive() for thread in threads), f"still {doing} after {wait_s} s"
