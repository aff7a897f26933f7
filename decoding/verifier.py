"""The model's choices for a pending token and a draft: one verification forward (or one per W-wide block), then
each row's token under the decoding rule. A plain greedy step is a verification with no draft.
"""

from collections.abc import Sequence

import torch

from .lane_kernel import lane_kernel_refusal
from .repetition import REPETITION_OFF, RepetitionRule
from .runners import open_runner
from .steps import ONE_TOKEN_STEPS, StepConfig, verify_in_blocks
from .threads import one_core_here


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
        return first_argmax(self.repetition.adjusted(logits, [], self.grounded))

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
        adjusted = self.repetition.adjusted
        return [first_argmax(adjusted(row, [*reply, *drafts[:j]], self.grounded)) for j, row in enumerate(logits)]

    def keep(self, n_inputs: int) -> None:
        """Roll back: the cache keeps the pending token and the accepted drafts, no rejected or padding entry."""
        self.fed += n_inputs
        self.runner.truncate(self.fed)

    def rewind(self, length: int) -> None:
        """Forget every position from `length` on (the cost model re-times steps over one context)."""
        self.fed = length
        self.runner.truncate(length)


def first_argmax(logits: torch.Tensor) -> int | list[int]:
    """The first index of the largest logit, of a row (V,) or of each row (n, V), as torch's argmax picks it (ties
    to the first, a NaN above any number). On the CPU through the lane library's kernel
    (decoding/csrc/first_argmax.cpp: 8 rows of 49,152 bf16 logits in 22 against 440 us, AMD EPYC), else the argmax
    of the float32 copy, which converts bf16 exactly and keeps its order (torch's bf16 argmax is 4x slower still).
    A reply's thread picks up to 8 rows between two forwards."""
    if _kernel_takes(logits):
        chosen = torch.ops.llma.first_argmax(logits.reshape(-1, logits.shape[-1]))
        return chosen if logits.dim() > 1 else chosen[0]
    chosen = logits.float().argmax(dim=-1)
    return chosen.tolist() if logits.dim() > 1 else int(chosen)


def _kernel_takes(logits: torch.Tensor) -> bool:
    return (logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float32)
            and logits.dim() in (1, 2) and logits.shape[-1] > 0 and lane_kernel_refusal() is None)
