"""Keys and values of prompts' prefill chunks, kept so that a prompt starting with the same tokens reuses them.

Support prompts share long beginnings: the system prompt always, and the help article whenever two customers
ask about the same thing. A prompt is prefilled in chunks of C tokens at multiples of C (StepConfig.prefill_chunk),
breaking off where its shared beginning ends and going on from there (StepConfig.prefill_break), so a chunk's keys
and values are a function of the tokens up to its end and of where the chunks before it began and ended: computed
now or taken from here, they are the same bits, and a reply is the same whether its prompt's beginning was cached
or not.

A chunk is found by a digest chained over every chunk up to its end, each its tokens (4 bytes apiece, so the
digest's input length is the chunk's length), so a chunk is reused only after the very same tokens cut into the
very same chunks. Least recently used chunks go first once `max_bytes` is reached. Safe to share between threads.
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PrefixStats:
    """What the cache saved: prompt tokens taken from it and prompt tokens computed."""

    reused_tokens: int = 0
    computed_tokens: int = 0


class PrefixCache:
    """Chunks of prompt keys and values by the digest of the tokens before and in them; LRU within `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.max_bytes = max_bytes
        self._chunks: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = PrefixStats()

    @staticmethod
    def first_key(chunk_len: int) -> bytes:
        """The digest a prompt's chain starts from: chunks of another length are other bits."""
        return hashlib.blake2b(f"chunk {chunk_len}".encode(), digest_size=16).digest()

    @staticmethod
    def next_key(previous: bytes, chunk_ids: Sequence[int]) -> bytes:
        """The digest of a chunk: the one before it and its own tokens."""
        payload = previous + b"".join(int(t).to_bytes(4, "little") for t in chunk_ids)
        return hashlib.blake2b(payload, digest_size=16).digest()

    def get(self, key: bytes) -> torch.Tensor | None:
        """The chunk's keys and values (2, layers, kv_heads, C, dim), or None."""
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
            return chunk

    def put(self, key: bytes, chunk: torch.Tensor) -> None:
        size = chunk.numel() * chunk.element_size()
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._chunks:
                return
            self._chunks[key] = chunk
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._chunks.popitem(last=False)
                self._bytes -= old.numel() * old.element_size()

    def clear(self) -> None:
        """Forget every chunk (a benchmark's fresh start); the counts stay."""
        with self._lock:
            self._chunks.clear()
            self._bytes = 0

    def snapshot(self) -> "OrderedDict[bytes, torch.Tensor]":
        """The chunks held now (a benchmark restores a warmed cache for every round)."""
        with self._lock:
            return OrderedDict(self._chunks)

    def restore(self, chunks: "OrderedDict[bytes, torch.Tensor]") -> None:
        """Hold exactly `chunks`, as a snapshot took them."""
        with self._lock:
            self._chunks = OrderedDict(chunks)
            self._bytes = sum(chunk.numel() * chunk.element_size() for chunk in chunks.values())

    def count(self, reused: int, computed: int) -> None:
        with self._lock:
            self.stats.reused_tokens += reused
            self.stats.computed_tokens += computed

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def bytes_held(self) -> int:
        return self._bytes
