"""A finished reply's KV cache is handed to the next reply of its length, zeroed: replies stay as from a fresh cache."""

import gc

import torch

from decoding import PackedLlama, StepConfig, greedy_generate
from decoding.kv_pool import FreeCaches
from decoding.runners import PackedRunner

from .invariance import make_tiny_model
from .test_invariance import random_ids

STEPS = StepConfig(width=8, cache_len=256)


def test_a_finished_replys_cache_goes_to_the_next_reply_zeroed():
    model = PackedLlama(make_tiny_model("llama", torch.bfloat16, seed=2))
    with torch.inference_mode():  # a cache made under inference mode is handed out, and zeroed, outside it
        runner = PackedRunner(model, STEPS)
        runner.prefill(random_ids(seed=1, n=40))
    first = runner.cache.keys[0]
    assert first.abs().sum() > 0
    del runner
    gc.collect()
    again = PackedRunner(model, STEPS)
    assert again.cache.keys[0] is first  # the same memory, not fresh pages
    assert all(not entries.any() for entries in (*again.cache.keys, *again.cache.values))
    other = PackedRunner(model, StepConfig(width=8, cache_len=512))  # another length: a cache of its own
    assert other.cache.keys[0] is not first and other.cache.cache_len == 512


def test_replies_decoded_in_reused_caches_equal_replies_in_fresh_ones():
    tiny = make_tiny_model("llama", torch.bfloat16, seed=3)
    reusing, fresh = PackedLlama(tiny), PackedLlama(tiny)
    fresh._free_caches = FreeCaches(max_kept=0)  # every reply in new zeros
    prompts = [random_ids(seed=s, n=20 + 13 * s) for s in range(4)]
    for prompt in prompts:
        # The reusing model decodes in the previous reply's cache, zeroed again.
        assert greedy_generate(reusing, prompt, 40, steps=STEPS).tokens == \
            greedy_generate(fresh, prompt, 40, steps=STEPS).tokens
    assert len(reusing._free_caches) == 1 and len(fresh._free_caches) == 0


def test_free_caches_keep_the_most_recent_few_and_only_give_a_matching_length():
    free = FreeCaches(max_kept=2)
    tensors = [([torch.ones(2)], [torch.ones(2)]) for _ in range(3)]
    for (keys, values), length in zip(tensors, (64, 128, 128), strict=True):
        cache = type("Cache", (), {})()
        free.watch(cache, length, keys, values)
        del cache  # the reply ended: kept now
    assert len(free) == 2  # the oldest, of 64 positions, dropped
    assert free.take(64) is None
    keys, values = free.take(128)
    assert keys[0] is tensors[2][0][0] and not keys[0].any() and not values[0].any()  # the newest, zeroed
    assert free.take(128) is not None and free.take(128) is None


def test_a_cache_released_while_the_free_list_is_locked_comes_back_without_the_lock():
    """A finalizer runs wherever the last reference goes, also in a garbage collection that an allocation inside
    `take` started while it held the lock: putting the cache back must not wait for that lock (a deadlock)."""
    free = FreeCaches()
    cache = type("Cache", (), {})()
    free.watch(cache, 64, [torch.ones(2)], [torch.ones(2)])
    with free._lock:
        del cache  # its finalizer runs here, on the thread holding the lock
    assert len(free) == 1 and free.take(64) is not None
