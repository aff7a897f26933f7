"""Embeddings as checked unit float32 vectors, and the bytes rows store them as, so scores stay cosines."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

Embed = Callable[[list[str]], np.ndarray]
# Questions whose vectors are remembered: a chat turn looks its question up three or four times (article, approved
# match, references, storing), and with several customers at once their turns interleave, so remembering only the
# last question embedded each one about four times (146 embeddings for 32 replies, 8 customers at once).
REMEMBERED_QUESTIONS = 256


REMEMBERED_PASSAGES = 50_000


class Embedding:
    """The caller's embed function, its output checked and normalized; remembers recent questions."""

    def __init__(self, embed: Embed, dim: int) -> None:
        self._embed = embed
        self.dim = dim
        self._questions: OrderedDict[str, np.ndarray] = OrderedDict()  # least recently asked first
        self._questions_lock = threading.Lock()
        self._passages: dict[str, np.ndarray] = {}  # grows with the help centre's sentences only

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) unit float32 vectors; a wrong shape raises, since it would poison the index."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._embed(list(texts)), dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"embed returned shape {vectors.shape}, expected {(len(texts), self.dim)}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # (n, 1)
        return vectors / np.maximum(norms, 1e-12)

    def similarities(self, question: str, texts: Sequence[str]) -> list[float]:
        """Cosines of a question to `texts`, whose vectors are kept (help-centre sentences recur in every turn)."""
        missing = [text for text in dict.fromkeys(texts) if text not in self._passages]
        if len(self._passages) + len(missing) > REMEMBERED_PASSAGES:  # staff rewrote the help centre many times
            self._passages = {}
        if missing:
            for text, vector in zip(missing, self.texts(missing), strict=True):
                vector.flags.writeable = False
                self._passages[text] = vector
        asked = self.question(question)
        return [float(self._passages[text] @ asked) for text in texts]

    def question(self, question: str) -> np.ndarray:
        """(dim,) vector of a question, memoized over the last REMEMBERED_QUESTIONS asked (read-only: shared)."""
        with self._questions_lock:
            vector = self._questions.get(question)
            if vector is not None:
                self._questions.move_to_end(question)
                return vector
        vector = self.texts([question])[0]  # outside the lock: two threads may embed one question, both alike
        vector.flags.writeable = False
        with self._questions_lock:
            self._questions[question] = vector
            while len(self._questions) > REMEMBERED_QUESTIONS:
                self._questions.popitem(last=False)
        return vector


def article_text(title: str, body: str) -> str:
    """What an article is embedded from: its title and body together."""
    return f"{title}\n\n{body}"


def to_bytes(vector: np.ndarray) -> bytes:
    return vector.astype(np.float32).tobytes()


def from_bytes(embedding: bytes) -> np.ndarray:
    return np.frombuffer(embedding, dtype=np.float32)


def stack(embeddings: Sequence[bytes], dim: int) -> np.ndarray:
    """(n, dim) float32 matrix of stored embeddings; (0, dim) for none."""
    if not embeddings:
        return np.zeros((0, dim), dtype=np.float32)
    return np.stack([from_bytes(embedding) for embedding in embeddings])


def cosine(query: np.ndarray, embedding: bytes) -> float:
    return float(np.clip(np.dot(query, from_bytes(embedding)), -1.0, 1.0))
