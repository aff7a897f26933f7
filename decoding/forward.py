"""Model plumbing shared by the decode loops and the cost model: one forward over a growing KV cache."""

from collections.abc import Sequence

import torch
from transformers import DynamicCache


def new_kv_cache(model: torch.nn.Module) -> DynamicCache:
    return DynamicCache(config=model.config)


def forward_tokens(model: torch.nn.Module, ids: torch.Tensor, cache: DynamicCache, logits_to_keep: int) -> torch.Tensor:
    """Run `ids` (1, T) on top of `cache`; returns logits of the last `logits_to_keep` positions (n, V)."""
    out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0]


def truncate_kv_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached keys and values past `length` positions (the rejected part of a draft)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5 takes the number of tokens to drop, negated


def prefill(model: torch.nn.Module, prompt_ids: Sequence[int], cache: DynamicCache) -> int:
    """Process the prompt; returns the model's first reply token."""
    logits = forward_tokens(model, torch.tensor([list(prompt_ids)]), cache, logits_to_keep=1)
    return int(logits[-1].argmax())
