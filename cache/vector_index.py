"""FAISS index of unit question vectors keyed by database ids; scores are cosine similarity in [-1, 1]."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np


@dataclass(frozen=True)
class IndexHit:
    id: int
    score: float


class VectorIndex:
    """IndexIDMap2 over IndexFlatIP; not locked itself, so callers serialize mutations."""

    def __init__(self, dim: int, index: faiss.IndexIDMap2 | None = None) -> None:
        self.dim = dim
        self._index = index if index is not None else faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        """Add (n, dim) vectors under `ids`, replacing any vectors already stored under those ids."""
        id_array = np.asarray(list(ids), dtype=np.int64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(id_array), self.dim)
        self.remove(id_array)
        self._index.add_with_ids(vectors, id_array)

    def remove(self, ids: Iterable[int]) -> None:
        id_array = np.asarray(list(ids), dtype=np.int64)
        if len(id_array):
            self._index.remove_ids(id_array)

    def search(self, vector: np.ndarray, k: int) -> list[IndexHit]:
        """The `k` nearest ids to one (dim,) vector, best first."""
        if k < 1 or len(self) == 0:
            return []
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
        # One query gains nothing from threads, and FAISS runs its parallel regions on the OpenMP runtime the
        # process loaded first (torch's libgomp): a region here gave the searching thread a team of its own, and
        # once libgomp manages more threads than cores its waiting threads stop spinning, which made every decode
        # forward of a service on 2 cores about twice as dear from then on (AMD EPYC: a grounded reply's 8-row
        # steps 12.6-14.3 against 22-26 ms). Set at every search: the setting is the calling thread's, and torch
        # puts it back at a thread's first call. Put back after: it is torch's setting of this thread too (a thread
        # that decodes itself, where no scheduler does, must keep its cores).
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            scores, ids = self._index.search(query, min(k, len(self)))  # (1, k) each
        finally:
            faiss.omp_set_num_threads(threads)
        return [
            IndexHit(int(i), float(np.clip(s, -1.0, 1.0))) for s, i in zip(scores[0], ids[0], strict=True) if i >= 0
        ]

    def ids(self) -> set[int]:
        return set(faiss.vector_to_array(self._index.id_map).tolist())

    def __len__(self) -> int:
        return self._index.ntotal

    def save(self, path: str | Path) -> None:
        """Write atomically: a temp file in the same folder, fsync, then rename over `path`."""
        path = Path(path)
        data = faiss.serialize_index(self._index)  # uint8 array
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data.tobytes())
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp_name, path)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path, dim: int) -> VectorIndex:
        """The index saved at `path`, or an empty one if it is missing, unreadable or of another dim."""
        try:
            index = faiss.deserialize_index(np.fromfile(path, dtype=np.uint8))
        except (OSError, RuntimeError, ValueError):
            return cls(dim)
        if not isinstance(index, faiss.IndexIDMap2) or index.d != dim:
            return cls(dim)
        return cls(dim, index)
