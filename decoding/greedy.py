"""Greedy decoding, the honest baseline LLMA must equal: the LLMA loop with nothing to copy.

Greedy here is the engine's decoding rule: the argmax, under a `RepetitionRule` when one is given (plain
argmax by default), decided from each position's logits and the reply before it. With no reference, not even
the prompt or the reply so far, LLMA never drafts, so each step is a verification of the pending token alone: one
loop (decoding/llma.py) decodes both, alone or through the scheduler's shared forwards.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch

from .llma import LlmaOptions, llma_stream
from .policy import FixedCopyPolicy
from .repetition import REPETITION_OFF, RepetitionRule
from .result import Chunk, DecodeResult
from .scheduler import Scheduler, Sharing, scheduled_llma_stream
from .steps import ONE_TOKEN_STEPS, StepConfig

NEVER_ASKED = FixedCopyPolicy(match_len=1, copy_len=1)  # nothing is indexed, so nothing ever matches


def nothing_to_copy(options: LlmaOptions) -> LlmaOptions:
    """`options` with the prompt and the reply so far no references either."""
    return replace(options, use_prompt=False, use_output=False)


def greedy_stream(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    result: DecodeResult | None = None,
    steps: StepConfig = ONE_TOKEN_STEPS,
    repetition: RepetitionRule = REPETITION_OFF,
) -> Iterator[Chunk]:
    """Yields each token as the model chooses it; each step is a verification of no draft."""
    options = nothing_to_copy(LlmaOptions(max_new_tokens, eos_token_id, repetition=repetition))
    yield from llma_stream(model, prompt_ids, [], NEVER_ASKED, options, result, steps)


def greedy_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    steps: StepConfig = ONE_TOKEN_STEPS,
    repetition: RepetitionRule = REPETITION_OFF,
) -> DecodeResult:
    result = DecodeResult()
    for chunk in greedy_stream(model, prompt_ids, max_new_tokens, eos_token_id, result, steps, repetition):
        if on_chunk is not None:
            on_chunk(chunk)
    return result


def scheduled_greedy(
    scheduler: Scheduler, prompt_ids: Sequence[int], options: LlmaOptions, steps: StepConfig,
    sharing: Sharing | None = None,
) -> DecodeResult:
    """Greedy decoding (under `options.repetition`) through the scheduler's shared forwards."""
    result = DecodeResult()
    chunks = scheduled_llma_stream(scheduler, prompt_ids, [], NEVER_ASKED, nothing_to_copy(options), steps, result,
                                   sharing)
    for _ in chunks:
        pass
    return result
