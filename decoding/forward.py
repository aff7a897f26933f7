"""Model plumbing shared by the decode loops and the cost model: forwards over a growing KV cache."""

from collections.abc import Sequence

import torch
import transformers
from transformers import DynamicCache
from transformers.cache_utils import Cache, StaticLayer

from .packed import PackedLlama, PackedRunner
from .repetition import REPETITION_OFF, RepetitionRule, first_argmax
from .steps import ONE_TOKEN_STEPS, StepConfig, verify_in_blocks
from .threads import one_core_here


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


def wants_fixed_width(model) -> bool:
    """W-wide steps where they are flat in cost and needed for bit-identity: the packed forward (fp32 or bf16;
    a few rows cost about what one does once weights are prepacked) and bf16 anywhere. transformers' fp32
    forward keeps one-token steps: there an 8-wide step costs about twice a one-token one."""
    return isinstance(model, PackedLlama) or model.dtype == torch.bfloat16


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


def open_runner(model, steps: StepConfig) -> "HfRunner | PackedRunner":
    """The forward `model` is: packed for a PackedLlama (W-wide steps only; decoding.engine decides), else
    transformers' own. Nothing here swaps one forward for another, so a label read off the model is right."""
    if isinstance(model, PackedLlama):
        return PackedRunner(model, steps)
    return HfRunner(model, steps)


class ModelVerifier:
    """The model's choices for the pending token and a draft, in forwards shaped by `steps`, under `repetition`.

    A plain greedy step is a verification with no draft, so greedy and LLMA run the same forwards and choose
    each token by the same rule from the same logits row and the same reply before it.
    """

    def __init__(
        self, model, prompt_ids: Sequence[int], steps: StepConfig = ONE_TOKEN_STEPS,
        repetition: RepetitionRule = REPETITION_OFF, runner=None,
    ) -> None:
        self.prompt_ids, self.steps, self.repetition = prompt_ids, steps, repetition
        self.grounded = repetition.numbers_in(prompt_ids)  # the numbers a reply may state, if the rule asks
        self.runner = runner if runner is not None else open_runner(model, steps)  # a scheduler may pass its own
        self.fed = len(prompt_ids)  # positions held in the KV cache, padding and rejected drafts excluded
        self.forward_passes = 0
        self.prompt_reused = 0

    def first_token(self) -> int:
        self.forward_passes += 1
        logits = self.runner.prefill(self.prompt_ids)
        self.prompt_reused = self.runner.reused
        # Also here, not only in scheduled_llma_stream: a thread decoding on the model itself while a scheduler
        # computes elsewhere (a test, a benchmark's baseline) goes to one core too.
        one_core_here()
        return self.repetition.choose(logits, [], self.grounded)

    def verify(self, inputs: list[int], reply: Sequence[int] = ()) -> list[int]:
        """The model's choice after each of `inputs` (the pending token, then k drafts).

        `reply` is the reply so far, ending with the pending token; row j chooses as if the reply were
        `reply` + draft[:j], which is what a one-token step there would see.
        """
        rows_done = 0  # a block's first row is input `rows_done`: the reply before it gained inputs[1 : rows_done + 1]

        def forward_block(block: list[int]) -> list[int]:
            nonlocal rows_done
            self.forward_passes += 1
            before = [*reply, *inputs[1 : rows_done + 1]]
            choices = self._choose(self.runner.step(block), before, inputs[rows_done + 1 :])
            rows_done += len(block)
            return choices

        return verify_in_blocks(inputs, self.steps, self.fed, forward_block)

    def _choose(self, logits: torch.Tensor, reply: Sequence[int], drafts: Sequence[int]) -> list[int]:
        """Row j of `logits` (n, V) chooses as if the reply were `reply` + drafts[:j]."""
        # Also here, not only in scheduled_llma_stream: a thread decoding on the model itself while a scheduler
        # computes elsewhere (a test, a benchmark's baseline) goes to one core too.
        one_core_here()
        if not self.repetition.changes_choice:
            return first_argmax(logits)
        return [self.repetition.choose(row, [*reply, *drafts[:j]], self.grounded) for j, row in enumerate(logits)]

    def keep(self, n_inputs: int) -> None:
        """Roll back: the cache keeps the pending token and the accepted drafts, no rejected or padding entry."""
        self.fed += n_inputs
        self.runner.truncate(self.fed)

    def rewind(self, length: int) -> None:
        """Forget every position from `length` on (the cost model re-times steps over one context)."""
        self.fed = length
        self.runner.truncate(length)


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
