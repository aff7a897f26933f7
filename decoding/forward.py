"""Model plumbing shared by the decode loops and the cost model: forwards over a growing KV cache."""

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from .steps import ONE_TOKEN_STEPS, StepConfig, verify_in_blocks


def new_kv_cache(model: torch.nn.Module) -> DynamicCache:
    """A cache whose layers keep every position, so a rejected draft can always be cropped.

    `DynamicCache(config=...)` would give sliding-window layers (Mistral) that drop old positions and then
    cannot roll back; a full layer keeps them while the model's mask still applies the window.
    """
    return DynamicCache()


def forward_tokens(model: torch.nn.Module, ids: torch.Tensor, cache: DynamicCache, logits_to_keep: int) -> torch.Tensor:
    """Run `ids` (1, T) on top of `cache`; returns logits of the last `logits_to_keep` positions (n, V)."""
    out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0]


def truncate_kv_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached keys and values past `length` positions (the rejected part of a draft, or padding)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5 takes the number of tokens to drop, negated


def token_tensor(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    return torch.tensor([list(ids)], device=model.device)  # (1, T)


def prefill(model: torch.nn.Module, prompt_ids: Sequence[int], cache: DynamicCache) -> int:
    """Process the prompt; returns the model's first reply token."""
    logits = forward_tokens(model, token_tensor(model, prompt_ids), cache, logits_to_keep=1)
    return int(logits[-1].argmax())


class ModelVerifier:
    """The model's greedy choices for the pending token and a draft, in forwards shaped by `steps`.

    A plain greedy step is a verification with no draft, so greedy and LLMA run the same forwards.
    """

    def __init__(self, model: torch.nn.Module, prompt_ids: Sequence[int], steps: StepConfig = ONE_TOKEN_STEPS) -> None:
        self.model, self.prompt_ids, self.steps = model, prompt_ids, steps
        self.cache = new_kv_cache(model)
        self.fed = len(prompt_ids)  # positions held in the KV cache, padding and rejected drafts excluded
        self.forward_passes = 0

    def first_token(self) -> int:
        self.forward_passes += 1
        return prefill(self.model, self.prompt_ids, self.cache)

    def verify(self, inputs: list[int]) -> list[int]:
        """The model's greedy token after each of `inputs` (k + 1 of them)."""
        return verify_in_blocks(inputs, self.steps.width, self._forward_block)

    def keep(self, n_inputs: int) -> None:
        """Roll back: the cache keeps the pending token and the accepted drafts, no rejected or padding entry."""
        self.fed += n_inputs
        truncate_kv_cache(self.cache, self.fed)

    def _forward_block(self, block: list[int]) -> list[int]:
        padded = self.steps.pad(block)
        # Every row goes through the LM head too, so row 0 of a greedy step and row j of a verification
        # see the same (W, hidden) @ (hidden, V) product.
        logits = forward_tokens(self.model, token_tensor(self.model, padded), self.cache, len(padded))  # (W, V)
        self.forward_passes += 1
        return logits[: len(block)].argmax(dim=-1).tolist()
