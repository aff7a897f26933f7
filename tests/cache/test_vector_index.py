import os
import threading

import faiss
import numpy as np

from cache import IndexHit, VectorIndex

WAIT_S = 60.0  # a search takes milliseconds; this only bounds a hang


def unit_rows(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_search_returns_nearest_ids_best_first_with_cosine_scores():
    index = VectorIndex(8)
    vectors = unit_rows(5)
    index.add([10, 11, 12, 13, 14], vectors)
    hits = index.search(vectors[2], k=3)
    assert hits[0] == IndexHit(12, hits[0].score) and abs(hits[0].score - 1.0) < 1e-5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(-1.0 <= h.score <= 1.0 for h in hits)
    assert len(index.search(vectors[0], k=50)) == 5


def test_adding_an_existing_id_replaces_its_vector_and_remove_drops_it():
    index = VectorIndex(8)
    vectors = unit_rows(3)
    index.add([1, 2], vectors[:2])
    index.add([1], vectors[2:])
    assert len(index) == 2 and index.ids() == {1, 2}
    assert index.search(vectors[2], k=1)[0].id == 1
    index.remove([1, 99])
    assert index.ids() == {2}


def test_save_and_load_round_trip(tmp_path):
    index = VectorIndex(8)
    index.add([3, 4], unit_rows(2))
    index.save(tmp_path / "index.faiss")
    assert VectorIndex.load(tmp_path / "index.faiss", 8).ids() == {3, 4}
    assert [p.name for p in tmp_path.iterdir()] == ["index.faiss"]  # no temp file left behind


def test_load_gives_an_empty_index_when_missing_corrupt_or_of_another_dim(tmp_path):
    path = tmp_path / "index.faiss"
    assert len(VectorIndex.load(path, 8)) == 0
    path.write_bytes(b"not a faiss index")
    assert len(VectorIndex.load(path, 8)) == 0
    path.write_bytes(b"")
    assert len(VectorIndex.load(path, 8)) == 0
    index = VectorIndex(8)
    index.add([1], unit_rows(1))
    index.save(path)
    assert len(VectorIndex.load(path, 16)) == 0
    path.write_bytes(path.read_bytes()[:40])  # truncated
    assert len(VectorIndex.load(path, 8)) == 0


def test_a_search_starts_no_thread_whatever_the_threads_openmp_setting():
    """FAISS runs its parallel regions on the OpenMP runtime the process loaded first (torch's): a search on two
    threads gave the searching thread an OpenMP team of its own, and the decoder's forwards then cost twice as
    much for the rest of the process (cache/vector_index.py)."""
    index = VectorIndex(64)
    index.add(range(400), unit_rows(400, dim=64))
    counts = []

    def search_in_a_fresh_thread() -> None:
        faiss.omp_set_num_threads(2)  # as torch leaves a thread on a 2-core machine
        before = len(os.listdir("/proc/self/task"))
        index.search(unit_rows(1, dim=64, seed=1)[0], k=4)
        counts.append((before, len(os.listdir("/proc/self/task")), faiss.omp_get_max_threads()))

    thread = threading.Thread(target=search_in_a_fresh_thread, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive(), f"one search still running after {WAIT_S} s"
    before, after, setting = counts[0]
    assert after <= before  # no OpenMP worker started (another thread of the process may have ended meanwhile)
    assert setting == 2  # the thread's own setting as it was: torch's too, where a thread decodes itself
