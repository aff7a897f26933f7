"""Greedy decoding and LLMA decoding on the same model code.

`llma_stream` reads like the paper's algorithm: find a match of the text so far in the references,
copy the tokens that follow it, verify them all in one forward pass, accept the longest prefix
equal to the model's greedy choices plus the model's next token, and roll the KV cache back.
"""

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from .cost_model import CostCurve, measure_cost_curve
from .policy import AdaptiveCopyPolicy, FixedCopyPolicy
from .reference_index import OUTPUT_SOURCE, PROMPT_SOURCE, Match, ReferenceIndex

CopyPolicy = AdaptiveCopyPolicy | FixedCopyPolicy


@dataclass(frozen=True)
class CopiedRun:
    """Consecutive reply tokens taken from one place of one reference."""

    source: int  # index into `references`, or PROMPT_SOURCE / OUTPUT_SOURCE
    ref_start: int  # position in that reference of the first copied token
    out_start: int  # position in the reply of the first copied token
    length: int


@dataclass
class DecodeResult:
    """Reply tokens and what it took to produce them; filled in place while streaming."""

    tokens: list[int] = field(default_factory=list)
    forward_passes: int = 0
    copied_tokens: int = 0
    drafted_tokens: int = 0
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    copied_runs: list[CopiedRun] = field(default_factory=list)
    finished_by_eos: bool = False


@dataclass(frozen=True)
class Chunk:
    """Tokens accepted by one forward pass, handed out as soon as they are verified."""

    tokens: list[int]
    copied: int  # how many of `tokens` came from a reference; the last one never does
    source: int | None  # the reference they came from, if any
    drafted: int  # tokens drafted for this pass; 0 means it was a plain one-token step
    result: DecodeResult  # running totals, the same object for every chunk of a call


# --- model plumbing shared by both loops -------------------------------------------------------


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


def _prefill(model: torch.nn.Module, prompt_ids: Sequence[int], cache: DynamicCache) -> int:
    """Process the prompt; returns the model's first reply token."""
    logits = forward_tokens(model, torch.tensor([list(prompt_ids)]), cache, logits_to_keep=1)
    return int(logits[-1].argmax())


def _check_inputs(prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids must hold at least one token")
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must not be negative")


def _accept(result: DecodeResult, new_tokens: list[int], max_new_tokens: int, eos_token_id: int | None) -> int:
    """Append tokens up to EOS (kept) or the budget; returns how many were kept."""
    kept = 0
    for token in new_tokens:
        if len(result.tokens) >= max_new_tokens or result.finished_by_eos:
            break
        result.tokens.append(token)
        kept += 1
        result.finished_by_eos = eos_token_id is not None and token == eos_token_id
    return kept


def _done(result: DecodeResult, max_new_tokens: int) -> bool:
    return result.finished_by_eos or len(result.tokens) >= max_new_tokens


# --- greedy: the honest baseline ----------------------------------------------------------------


@torch.inference_mode()
def greedy_stream(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    result: DecodeResult | None = None,
) -> Iterator[Chunk]:
    """Plain greedy decoding, one token per forward pass."""
    _check_inputs(prompt_ids, max_new_tokens)
    result = result if result is not None else DecodeResult()
    start = time.perf_counter()
    if max_new_tokens == 0:
        return
    cache = new_kv_cache(model)
    token = _prefill(model, prompt_ids, cache)
    result.forward_passes = 1
    result.prefill_seconds = time.perf_counter() - start
    while True:
        _accept(result, [token], max_new_tokens, eos_token_id)
        result.seconds = time.perf_counter() - start
        yield Chunk([token], copied=0, source=None, drafted=0, result=result)
        if _done(result, max_new_tokens):
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


# --- LLMA ---------------------------------------------------------------------------------------


def build_reference_index(
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    use_prompt: bool,
    use_output: bool,
    max_match_len: int,
    lead_in_len: int,
) -> ReferenceIndex:
    """References in the caller's order (best first), then the prompt, then the reply so far.

    Each reference is indexed behind the prompt's last `lead_in_len` tokens (a chat template's
    "assistant" header), so a past answer can be copied from the reply's very first token.
    """
    index = ReferenceIndex(max_match_len=max_match_len)
    lead_in = list(prompt_ids[len(prompt_ids) - lead_in_len :]) if lead_in_len else []
    for i, ref in enumerate(references):
        index.add(i, [*lead_in, *ref])
    if use_prompt:
        index.add(PROMPT_SOURCE, prompt_ids)
    if use_output:
        index.add(OUTPUT_SOURCE, [])
    return index


class ModelVerifier:
    """Checks drafts with the model: one forward pass over the pending token and the draft."""

    def __init__(self, model: torch.nn.Module, prompt_ids: Sequence[int]) -> None:
        self.model, self.prompt_ids = model, prompt_ids
        self.cache = new_kv_cache(model)
        self.fed = len(prompt_ids)  # positions held in the KV cache

    def first_token(self) -> int:
        return _prefill(self.model, self.prompt_ids, self.cache)

    def verify(self, inputs: list[int]) -> list[int]:
        """The model's greedy token after each of `inputs` (k + 1 of them)."""
        logits = forward_tokens(self.model, torch.tensor([inputs]), self.cache, logits_to_keep=len(inputs))
        return logits.argmax(dim=-1).tolist()

    def keep(self, n_inputs: int) -> None:
        """Roll back: the cache keeps the pending token and the accepted drafts, nothing rejected."""
        self.fed += n_inputs
        truncate_kv_cache(self.cache, self.fed)


@torch.inference_mode()
def llma_stream(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]] = (),
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    policy: CopyPolicy | None = None,
    use_prompt: bool = True,
    use_output: bool = True,
    max_match_len: int = 12,
    lead_in_len: int = 4,
    result: DecodeResult | None = None,
) -> Iterator[Chunk]:
    """LLMA decoding: yields each verified chunk; the tokens equal greedy decoding's exactly."""
    _check_inputs(prompt_ids, max_new_tokens)
    if max_new_tokens == 0:
        return
    yield from llma_steps(
        ModelVerifier(model, prompt_ids), prompt_ids, references, max_new_tokens, eos_token_id,
        policy or default_policy(model), use_prompt, use_output, max_match_len, lead_in_len, result,
    )


def llma_steps(
    verifier,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_token_id: int | None,
    policy: CopyPolicy,
    use_prompt: bool = True,
    use_output: bool = True,
    max_match_len: int = 12,
    lead_in_len: int = 4,
    result: DecodeResult | None = None,
) -> Iterator[Chunk]:
    """The LLMA loop over any verifier (the model, or a replay of known greedy tokens for tuning)."""
    result = result if result is not None else DecodeResult()
    start = time.perf_counter()
    drafter = policy.start()
    lead_in_len = min(lead_in_len, len(prompt_ids))
    index = build_reference_index(prompt_ids, references, use_prompt, use_output, max_match_len, lead_in_len)
    token = verifier.first_token()
    result.forward_passes = 1
    result.prefill_seconds = time.perf_counter() - start
    context = list(prompt_ids)  # the text the model has seen or chosen, whose suffix we match
    prefer: tuple[int, int] | None = None
    new_tokens, copied, match, draft = [token], 0, None, []
    while True:
        kept = _accept(result, new_tokens, max_new_tokens, eos_token_id)
        context.extend(new_tokens[:kept])
        if use_output:
            index.extend(OUTPUT_SOURCE, new_tokens[:kept])
        copied = min(copied, kept)
        _record_copy(result, match, copied, kept, lead_in_len)
        result.seconds = time.perf_counter() - start
        source = match.source if copied else None
        yield Chunk(new_tokens[:kept], copied=copied, source=source, drafted=len(draft), result=result)
        if _done(result, max_new_tokens):
            return

        # 1. Find the longest match of the text so far, preferring to continue the last copied run.
        match = index.find(context[-max_match_len:], prefer)
        continuing = match is not None and (match.source, match.next_pos) == prefer
        # 2. Copy: the policy picks k; a budget of b tokens leaves room for b - 1 drafts plus one.
        budget = max_new_tokens - len(result.tokens)
        draft = index.continuation(match, drafter.copy_len(match, continuing, budget - 1)) if match else []
        # 3. Verify the pending token and the draft in one forward pass.
        greedy_choices = verifier.verify([context[-1], *draft])  # (k + 1,)
        result.forward_passes += 1
        # 4. Accept the longest prefix of the draft that equals the model's choices, plus its next token.
        copied = _matching_prefix_len(draft, greedy_choices)
        new_tokens = [*draft[:copied], greedy_choices[copied]]
        # 5. Roll back whatever the verifier holds for the rejected part of the draft.
        verifier.keep(1 + copied)
        result.drafted_tokens += len(draft)
        if match is not None:
            drafter.record(match, continuing, len(draft), copied)
            prefer = (match.source, match.next_pos + copied + 1)


def llma_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]] = (),
    max_new_tokens: int = 256,
    eos_token_id: int | None = None,
    policy: CopyPolicy | None = None,
    use_prompt: bool = True,
    use_output: bool = True,
    max_match_len: int = 12,
    lead_in_len: int = 4,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> DecodeResult:
    """LLMA decoding to the end; `on_chunk` sees each verified chunk as it lands."""
    result = DecodeResult()
    stream = llma_stream(
        model, prompt_ids, references, max_new_tokens, eos_token_id, policy, use_prompt, use_output,
        max_match_len, lead_in_len, result,
    )
    for chunk in stream:
        if on_chunk is not None:
            on_chunk(chunk)
    return result


def _matching_prefix_len(draft: list[int], greedy_choices: list[int]) -> int:
    n = 0
    while n < len(draft) and draft[n] == greedy_choices[n]:
        n += 1
    return n


def _record_copy(result: DecodeResult, match: Match | None, copied: int, kept: int, lead_in_len: int) -> None:
    """Count the copied tokens of the chunk just kept and note where in which reference they were."""
    if match is None or copied == 0:
        return
    result.copied_tokens += copied
    out_start = len(result.tokens) - kept
    ref_start = match.next_pos - lead_in_len if match.source >= 0 else match.next_pos
    result.copied_runs.append(CopiedRun(match.source, ref_start, out_start, copied))


# --- default policy -----------------------------------------------------------------------------

_curves: "weakref.WeakKeyDictionary[torch.nn.Module, CostCurve]" = weakref.WeakKeyDictionary()


def default_policy(model: torch.nn.Module) -> AdaptiveCopyPolicy:
    """The adaptive policy on this model's cost curve, measured once per process and model."""
    if model not in _curves:
        _curves[model] = measure_cost_curve(model)
    return AdaptiveCopyPolicy(cost=_curves[model])
