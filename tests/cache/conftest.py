"""Shared fixtures: the real embedder (loaded once) and fresh caches in tmp_path, on SQLite and PostgreSQL.

Every test that opens a cache runs twice: once on SQLite in the data folder, once on a fresh database of
the session's throwaway PostgreSQL server (one database per data folder, so two folders are two stores).
"""

import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cache import AnswerCache, Embedder
from cache.store import DB_FILE

_database_numbers = itertools.count()


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


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, request) -> Callable[[Path], str]:
    """The database URL of the store for a data folder: SQLite inside it, or its own PostgreSQL database."""
    server = request.getfixturevalue("postgres") if backend == "postgresql" else None
    urls: dict[Path, str] = {}
    lock = threading.Lock()  # replicas may be opened from several threads at once

    def url(data_dir: Path) -> str:
        with lock:
            return urls.get(data_dir) or urls.setdefault(data_dir, new_url(data_dir))

    def new_url(data_dir: Path) -> str:
        if server is None:
            data_dir.mkdir(parents=True, exist_ok=True)
            return f"sqlite:///{data_dir / DB_FILE}"
        return server.create_database(f"cache_test_{next(_database_numbers)}")

    return url


@pytest.fixture
def open_cache(embedder: Embedder, store_url, tmp_path: Path) -> Callable[..., AnswerCache]:
    """Open (or reopen) a cache in tmp_path/data; every cache opened is closed after the test.
    `store` names another data folder whose database to share, as a second replica does."""
    opened = []

    def open_(data_dir: Path = tmp_path / "data", store: Path | None = None, **options) -> AnswerCache:
        options.setdefault("embed", embedder.embed)
        options.setdefault("dim", embedder.dim)
        cache = AnswerCache.open(data_dir, url=store_url(store or data_dir), **options)
        opened.append(cache)
        return cache

    yield open_
    for cache in opened:
        cache.close()


@pytest.fixture
def cache(open_cache) -> AnswerCache:
    return open_cache()
