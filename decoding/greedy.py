"""Greedy decoding, one token per forward pass: the honest baseline LLMA must equal.

Greedy here is the engine's decoding rule: the argmax, under a `RepetitionRule` when one is given (plain
argmax by default), decided from each position's logits and the reply before it.
"""

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from .forward import ModelVerifier
from .repetition import REPETITION_OFF, RepetitionRule
from .result import Chunk, DecodeResult, check_inputs
from .steps import ONE_TOKEN_STEPS, StepConfig


@torch.inference_mode()
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
    check_inputs(prompt_ids, max_new_tokens)
    steps.check_fits(len(prompt_ids), max_new_tokens)
    result = result if result is not None else DecodeResult()
    start = time.perf_counter()
    if max_new_tokens == 0:
        return
    verifier = ModelVerifier(model, prompt_ids, steps, repetition)
    token = verifier.first_token()
    result.prefill_seconds, result.prompt_reused = time.perf_counter() - start, verifier.prompt_reused
    while True:
        result.forward_passes = verifier.forward_passes
        result.accept([token], max_new_tokens, eos_token_id, repetition)
        dropped = result.drop_repeat()  # the stop rule cuts the reply where its repetition began
        result.seconds = time.perf_counter() - start
        yield Chunk([token], copied=0, source=None, drafted=0, result=result, dropped=dropped)
        if result.done():
            return
        token = verifier.verify([token], result.tokens)[0]
        verifier.keep(1)


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
