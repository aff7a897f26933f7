"""Plain greedy decoding, one token per forward pass: the honest baseline LLMA must equal."""

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from .forward import forward_tokens, new_kv_cache, prefill
from .result import Chunk, DecodeResult, check_inputs


@torch.inference_mode()
def greedy_stream(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    result: DecodeResult | None = None,
) -> Iterator[Chunk]:
    """Yields each token as the model chooses it."""
    check_inputs(prompt_ids, max_new_tokens)
    result = result if result is not None else DecodeResult()
    start = time.perf_counter()
    if max_new_tokens == 0:
        return
    cache = new_kv_cache(model)
    token = prefill(model, prompt_ids, cache)
    result.forward_passes = 1
    result.prefill_seconds = time.perf_counter() - start
    while True:
        result.accept([token], max_new_tokens, eos_token_id)
        result.seconds = time.perf_counter() - start
        yield Chunk([token], copied=0, source=None, drafted=0, result=result)
        if result.done(max_new_tokens):
            return
        logits = forward_tokens(model, torch.tensor([[token]]), cache, logits_to_keep=1)
        result.forward_passes += 1
        token = int(logits[-1].argmax())


def greedy_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> DecodeResult:
    result = DecodeResult()
    for chunk in greedy_stream(model, prompt_ids, max_new_tokens, eos_token_id, result):
        if on_chunk is not None:
            on_chunk(chunk)
    return result
