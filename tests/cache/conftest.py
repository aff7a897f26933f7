"""Shared fixtures: the real embedder (loaded once) and fresh caches in tmp_path."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cache import AnswerCache, Embedder


@pytest.fixture(autouse=True)
def one_torch_thread():
    """MiniLM on one short text is tiny: on a busy 2-core machine two torch threads wait on each other
    (about 30x slower), so these tests use one and then restore the setting for other packages' tests."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return Embedder.load()


@pytest.fixture
def open_cache(embedder: Embedder, tmp_path: Path) -> Callable[..., AnswerCache]:
    """Open (or reopen) a cache in tmp_path/data; every cache opened is closed after the test."""
    opened = []

    def open_(data_dir: Path = tmp_path / "data", **options) -> AnswerCache:
        cache = AnswerCache.open(data_dir, embedder.embed, embedder.dim, **options)
        opened.append(cache)
        return cache

    yield open_
    for cache in opened:
        cache.close()


@pytest.fixture
def cache(open_cache) -> AnswerCache:
    return open_cache()
