"""KV caches of finished replies, kept for the next reply that needs one of the same length.

A reply's preallocated cache is big (the bundled model: 23 MB for 1,024 positions in bf16) and, freshly
allocated, every page of it is faulted in while it is zeroed: ~5,700 faults, which cost 0.16-0.25 s per reply
inside the running service (AMD EPYC virtual machine, ~36 us a fault; measured with getrusage around
`new_cache`), all of it before the reply's first token. A kept cache is zeroed again instead (~1 ms), so a
reply starts from exactly what a fresh cache holds and never sees an earlier reply's entries.
"""

import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass

import torch

# Kept for the replies after: as many as decode at once by default (CHATBOT_MAX_CONCURRENT_REPLIES). They are
# kept whatever their lengths (steps of 256 positions), so idle ones can hold up to 8 x 23 MB (1,024 positions,
# the bundled model in bf16) beyond the caches of the replies decoding.
KEPT_CACHES = 8


@dataclass(frozen=True)
class KeptCache:
    """One finished reply's layer tensors, waiting for the next reply of its length."""

    cache_len: int
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class FreeCaches:
    """Layer tensors of caches no reply holds any more, by cache length, oldest dropped first past `max_kept`."""

    def __init__(self, max_kept: int = KEPT_CACHES) -> None:
        self.max_kept = max_kept
        self._free: OrderedDict[int, KeptCache] = OrderedDict()
        self._lock = threading.Lock()
        self._serial = 0  # keys of the free list: several caches of one length may wait at once
        # Where finalizers put caches back. They run on whichever thread drops the last reference, also inside a
        # garbage collection that an allocation under `_lock` started: so they take no lock, and a deque's append
        # is atomic; `take` moves them into the free list.
        self._returned: deque[KeptCache] = deque()

    def take(self, cache_len: int) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """Zeroed keys and values of a kept cache of `cache_len` positions, or None when none waits."""
        with self._lock:
            self._file_returned()
            serial = next((s for s, kept in reversed(self._free.items()) if kept.cache_len == cache_len), None)
            if serial is None:
                return None
            kept = self._free.pop(serial)
        with torch.inference_mode():  # a cache made under it may only be written under it (every forward is)
            for entries in (*kept.keys, *kept.values):
                entries.zero_()
        return kept.keys, kept.values

    def watch(self, cache: object, cache_len: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Keep `keys` and `values` once nothing refers to `cache` any more (the reply ended, its lanes too)."""
        if self.max_kept > 0:
            weakref.finalize(cache, self._returned.append, KeptCache(cache_len, keys, values))

    def _file_returned(self) -> None:
        """Under `_lock`: returned caches join the free list, the oldest dropped past `max_kept`."""
        while self._returned:
            self._serial += 1
            self._free[self._serial] = self._returned.popleft()
        while len(self._free) > max(self.max_kept, 0):
            self._free.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            self._file_returned()
            return len(self._free)
