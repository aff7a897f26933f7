"""A reply's forwards over its own KV cache, one prompt at a time: the prefill, then decode steps shaped by a
`StepConfig`. `PackedRunner` runs the packed forward (decoding/packed.py); `HfRunner` transformers' own, for any
architecture. Which one a forward gets is read off the forward's packing (decoding/recipe.py), never swapped.
"""

from collections.abc import Iterator, Sequence

import torch
import transformers
from transformers import DynamicCache
from transformers.cache_utils import Cache, StaticLayer

from .packed import Lane, PackedLlama
from .prefix_cache import PrefixCache
from .recipe import packing_of
from .steps import ONE_TOKEN_STEPS, StepConfig


def open_runner(model, steps: StepConfig) -> "HfRunner | PackedRunner":
    """The runner of the forward `model` is: packed (W-wide steps only; decoding.engine decides), else transformers'."""
    if packing_of(model).forward == "packed":
        return PackedRunner(model, steps)
    return HfRunner(model, steps)


def new_kv_cache(model: torch.nn.Module, steps: StepConfig = ONE_TOKEN_STEPS) -> Cache:
    """A cache whose layers keep every position, so a rejected draft can always be rolled back.

    `DynamicCache(config=...)` would give sliding-window layers (Mistral) that drop old positions and then
    cannot roll back; full layers keep them while the model's mask still applies the window. Under a step
    width the layers are preallocated (gpt-fast's cache): rolling back only moves the end.
    """
    if steps.width is None:
        return DynamicCache()
    return Cache(layers=[StaticLayer(steps.cache_len) for _ in range(_layer_count(model))])


def forward_tokens(model: torch.nn.Module, ids: torch.Tensor, cache: Cache, logits_to_keep: int) -> torch.Tensor:
    """Run `ids` (1, T) on top of `cache`; returns logits of the last `logits_to_keep` positions (n, V)."""
    out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0]


def check_cache_written(cache: Cache, length: int) -> None:
    """Fail loudly where the forward left `cache` without the prompt's `length` positions: a transformers that
    names the keyword `past_key_values` takes `cache=` into its **kwargs and ignores it, and every step after
    would then see no prompt at all (issue 43, transformers 5.17: LLMA differed from greedy in 4 of 6 cases)."""
    held = int(cache.get_seq_length())
    if held != length:
        raise RuntimeError(
            f"the model's forward kept {held} of the prompt's {length} positions in the KV cache passed as cache=: "
            f"this transformers ({transformers.__version__}) does not read that keyword; install the version "
            "requirements.txt pins"
        )


def truncate_kv_cache(cache: Cache, length: int) -> None:
    """Drop cached keys and values past `length` positions (the rejected part of a draft, or padding)."""
    extra = int(cache.get_seq_length()) - length  # a preallocated cache counts in a tensor
    if extra > 0:
        cache.crop(-extra)  # transformers 5 takes the number of tokens to drop, negated


def token_tensor(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    return torch.tensor([list(ids)], device=model.device)  # (1, T)


class HfRunner:
    """Decode forwards of a transformers model for one prompt over its own KV cache (any architecture)."""

    def __init__(self, model: torch.nn.Module, steps: StepConfig) -> None:
        self.model, self.steps = model, steps
        self.cache = new_kv_cache(model, steps)
        self.length = 0  # positions held: the prompt, then each block's real inputs
        self.reused = 0  # transformers' forward keeps no prompt chunks

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor:
        self.length = len(prompt_ids)
        logits = forward_tokens(self.model, token_tensor(self.model, prompt_ids), self.cache, logits_to_keep=1)[-1]
        check_cache_written(self.cache, self.length)
        return logits

    def step(self, block: list[int]) -> torch.Tensor:
        """Logits (len(block), V); the padding's entries are dropped at once, so a next block follows on."""
        logits = step_logits(self.model, block, self.cache, self.steps)
        self.length += len(block)
        if self.steps.width is not None and len(block) < self.steps.width:
            truncate_kv_cache(self.cache, self.length)
        return logits

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)
        truncate_kv_cache(self.cache, self.length)


def step_logits(model: torch.nn.Module, block: list[int], cache: Cache, steps: StepConfig) -> torch.Tensor:
    """Logits (len(block), V) of one decode forward of `block`, padded to the step width, over `cache`.

    The cache keeps the padding's entries; the caller crops them. Every row goes through the LM head too,
    so row 0 of a greedy step and row j of a verification come from the same (W, hidden) @ (hidden, V) product.
    """
    padded = steps.pad(block)
    logits = forward_tokens(model, token_tensor(model, padded), cache, logits_to_keep=len(padded))  # (W, V)
    return logits[: len(block)]


def _layer_count(model: torch.nn.Module) -> int:
    return model.config.get_text_config(decoder=True).num_hidden_layers


class PackedRunner:
    """Decode forwards of a `PackedLlama` for one prompt: the prefill, then steps `steps.width` wide."""

    def __init__(self, model: PackedLlama, steps: StepConfig) -> None:
        if steps.width is None:
            raise ValueError("the packed forward runs fixed-width steps only")
        self.model, self.steps = model, steps
        self.cache = model.new_cache(steps.cache_len)
        self.length = 0  # positions held: the prompt, then each block's real inputs (padding is overwritten)
        self.reused = 0  # prompt tokens whose keys and values came from the prefix cache

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor:
        """Logits (V,) of the prompt's last token, its keys and values in the cache."""
        *_, logits = self.prefill_steps(prompt_ids)
        return logits

    def prefill_steps(self, prompt_ids: Sequence[int], counted: bool = True) -> Iterator[torch.Tensor | None]:
        """The prefill a forward at a time: None after each chunk but the last, then the last token's logits (V,).

        Full chunks before the last one, and the shared beginning's last chunk (StepConfig.prefill_break), are
        taken from the model's prefix cache where an earlier prompt began with the same tokens
        (decoding/prefix_cache.py), and kept there once computed. The prefill is shared by
        greedy and LLMA alike, so any key count does; each forward's granule end is cheapest. `counted`: in the
        cache's reuse counts (a warm-up's prefill is not a prompt's)."""
        chunked, prefixes = self.steps.prefill_chunk is not None, self.model.prefixes
        kept = chunked and prefixes.max_bytes > 0  # else no digest, lookup or copy: nothing would be kept
        key = PrefixCache.first_key(self.steps.prefill_chunk or 0)
        reused = 0
        for start, end in self.steps.prefill_chunks(len(prompt_ids)):
            full = kept and self.steps.kept_chunk(start, end)
            if full:
                key = PrefixCache.next_key(key, prompt_ids[start:end])
            if full and end < len(prompt_ids) and (kv := prefixes.get(key)) is not None:
                self._write(kv, start, end)
                reused += end - start
                continue
            ids = self._ids(prompt_ids[start:end])
            logits = self.model.prefill(ids, start, self.cache, self.steps.key_len(end - 1), chunked)
            if full:
                prefixes.put(key, self._read(start, end))
            if end < len(prompt_ids):
                yield None
        if chunked and counted:
            prefixes.count(reused, len(prompt_ids) - reused)
        self.reused = reused
        self.length = len(prompt_ids)
        yield logits[-1]

    @torch.inference_mode()  # on the scheduler's thread too, over a cache made in inference mode
    def _read(self, start: int, end: int) -> torch.Tensor:
        """Keys and values of positions start..end, (2, layers, kv_heads, end - start, dim), a copy."""
        return torch.stack([
            torch.stack([layer[0, :, start:end] for layer in self.cache.keys]),
            torch.stack([layer[0, :, start:end] for layer in self.cache.values]),
        ])

    @torch.inference_mode()  # on the scheduler's thread too, over a cache made in inference mode
    def _write(self, kv: torch.Tensor, start: int, end: int) -> None:
        for layer, keys in enumerate(self.cache.keys):
            keys[0, :, start:end] = kv[0, layer]
        for layer, values in enumerate(self.cache.values):
            values[0, :, start:end] = kv[1, layer]

    def step(self, block: list[int]) -> torch.Tensor:
        """Logits (len(block), V) of one forward of `block` padded to the step width; every row through the head.

        A next block follows on after the real inputs, writing over the padding's entries."""
        logits = self.model.forward_lanes([self.lane(block)])[0]
        self.advance(len(block))
        return logits[: len(block)]

    def lane(self, block: list[int]) -> Lane:
        """`block`, padded to the step width, as this reply's rows of a forward (alone or shared)."""
        if len(block) > self.steps.block_len(self.length):
            raise ValueError(f"a block of {len(block)} at position {self.length} crosses a key granule")
        return Lane(self._ids(self.steps.pad(block)), self.length, self.cache, self.steps.key_len(self.length))

    def advance(self, n_inputs: int) -> None:
        """The block's real inputs are held now; the padding's entries get overwritten by the next block."""
        self.length += n_inputs

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def _ids(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(ids), device=self.model.device)
