"""Helpers shared by the cache tests (a plain module: `from conftest import` is ambiguous across packages)."""

from cache import NewAnswer


def answer(question: str, text: str = "an answer", model_id: str = "model-a", **fields) -> NewAnswer:
    """A NewAnswer with defaults for everything a test does not care about."""
    return NewAnswer(question=question, answer=text, answer_ids=[1, 2, 3], model_id=model_id, **fields)
