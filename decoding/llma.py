"""LLMA decoding: reads like the paper's algorithm.

Find a match of the text so far in the references, copy the tokens that follow it, verify them all in
one forward pass, accept the longest prefix equal to the model's choices plus the model's next token, and
roll the KV cache back. The model's choice is greedy's, or greedy's under a `RepetitionRule` (decided row by
row from the reply before each position, decoding/repetition.py). The loop runs over a `Verifier`: the
model, or a replay of a known reply (decoding/simulate.py) for tuning policies without it.
"""

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from .policy import CopyPolicy
from .reference_index import OUTPUT_SOURCE, PROMPT_SOURCE, Match, ReferenceIndex
from .repetition import REPETITION_OFF, RepetitionRule
from .result import Chunk, CopiedRun, DecodeResult, check_inputs
from .steps import ONE_TOKEN_STEPS, StepConfig
from .verifier import ModelVerifier


@dataclass(frozen=True)
class LlmaOptions:
    """The reply's limits and where LLMA looks for text to copy; the defaults are the tuned ones."""

    max_new_tokens: int = 256
    eos_token_id: int | None = None
    use_prompt: bool = True  # the prompt (help article, conversation) is a reference of its own
    use_output: bool = True  # so is the reply so far
    max_match_len: int = 12  # longest suffix of the text so far that is looked up
    lead_in_len: int = 4  # prompt tokens (the chat template's assistant header) put before each reference
    repetition: RepetitionRule = REPETITION_OFF  # the decoding rule LLMA equals: plain greedy by default


DEFAULT_OPTIONS = LlmaOptions()


class Verifier(Protocol):
    """Tells the model's choices for a pending token and a draft, and keeps what was accepted.

    `verify` gets the reply so far (ending with the pending token): row j's choice is the one a one-token
    step would make after `reply` + draft[:j], which a repetition rule needs.
    """

    forward_passes: int  # forwards run so far, the prefill included
    prompt_reused: int  # prompt tokens whose keys and values came from an earlier prompt's prefill (0: none)

    def first_token(self) -> int: ...

    def verify(self, inputs: list[int], reply: Sequence[int]) -> list[int]: ...

    def keep(self, n_inputs: int) -> None: ...


def build_reference_index(
    prompt_ids: Sequence[int], references: Sequence[Sequence[int]], options: LlmaOptions
) -> ReferenceIndex:
    """References in the caller's order (best first), then the prompt, then the reply so far.

    Each reference is indexed behind the prompt's last `lead_in_len` tokens (a chat template's
    "assistant" header), so a past answer can be copied from the reply's very first token.
    """
    index = ReferenceIndex(max_match_len=options.max_match_len)
    lead_in_len = min(options.lead_in_len, len(prompt_ids))
    lead_in = list(prompt_ids[len(prompt_ids) - lead_in_len :]) if lead_in_len else []
    for i, ref in enumerate(references):
        index.add(i, [*lead_in, *ref])
    if options.use_prompt:
        index.add(PROMPT_SOURCE, prompt_ids)
    if options.use_output:
        index.add(OUTPUT_SOURCE, [])
    return index


def llma_steps(
    verifier: Verifier,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    policy: CopyPolicy,
    options: LlmaOptions,
    result: DecodeResult | None = None,
) -> Iterator[Chunk]:
    """The LLMA loop: yields each verified chunk; the tokens equal one-token decoding's under the same rule."""
    result = result if result is not None else DecodeResult()
    start = time.perf_counter()
    drafter = policy.start()
    max_new, eos, repetition = options.max_new_tokens, options.eos_token_id, options.repetition
    lead_in_len = min(options.lead_in_len, len(prompt_ids))
    index = build_reference_index(prompt_ids, references, options)
    token = verifier.first_token()
    result.prefill_seconds, result.prompt_reused = time.perf_counter() - start, verifier.prompt_reused
    context = list(prompt_ids)  # the text the model has seen or chosen, whose suffix we match
    prefer: tuple[int, int] | None = None
    new_tokens, copied, match, draft = [token], 0, None, []
    while True:
        result.forward_passes = verifier.forward_passes
        kept = result.accept(new_tokens, max_new, eos, repetition)  # token by token: EOS, stop rule, budget
        context.extend(new_tokens[:kept])
        if options.use_output:
            index.extend(OUTPUT_SOURCE, new_tokens[:kept])
        copied = min(copied, kept)
        _record_copy(result, match, copied, kept, lead_in_len)
        dropped = result.drop_repeat()  # the stop rule cuts the reply where its repetition began
        result.seconds = time.perf_counter() - start
        source = match.source if copied else None
        yield Chunk(new_tokens[:kept], copied=copied, source=source, drafted=len(draft), result=result, dropped=dropped)
        if result.done():
            return

        # 1. Find the longest match of the text so far, preferring to continue the last copied run.
        match = index.find(context[-options.max_match_len :], prefer)
        continuing = match is not None and (match.source, match.next_pos) == prefer
        # 2. Copy: the policy picks k; a budget of b tokens leaves room for b - 1 drafts plus one.
        budget = max_new - len(result.tokens)
        draft = index.continuation(match, drafter.copy_len(match, continuing, budget - 1)) if match else []
        # 3. Verify the pending token and the draft in one forward pass (W-wide blocks under a step width);
        #    row j chooses as one-token decoding would after the reply so far plus draft[:j].
        choices = verifier.verify([context[-1], *draft], result.tokens)  # (k + 1,)
        # 4. Accept the longest prefix of the draft that equals the model's choices, plus its next token.
        copied = _matching_prefix_len(draft, choices)
        new_tokens = [*draft[:copied], choices[copied]]
        # 5. Roll back whatever the verifier holds for the rejected part of the draft.
        verifier.keep(1 + copied)
        result.drafted_tokens += len(draft)
        if match is not None:
            drafter.record(match, continuing, len(draft), copied)
            prefer = (match.source, match.next_pos + copied + 1)


@torch.inference_mode()
def llma_stream(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    policy: CopyPolicy,
    options: LlmaOptions = DEFAULT_OPTIONS,
    result: DecodeResult | None = None,
    steps: StepConfig = ONE_TOKEN_STEPS,
) -> Iterator[Chunk]:
    """LLMA decoding with the model as verifier; yields each verified chunk as it lands."""
    check_inputs(prompt_ids, options.max_new_tokens)
    steps.check_fits(len(prompt_ids), options.max_new_tokens)
    if options.max_new_tokens == 0:
        return
    verifier = ModelVerifier(model, prompt_ids, steps, options.repetition)
    yield from llma_steps(verifier, prompt_ids, references, policy, options, result)


def llma_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    policy: CopyPolicy,
    options: LlmaOptions = DEFAULT_OPTIONS,
    on_chunk: Callable[[Chunk], None] | None = None,
    steps: StepConfig = ONE_TOKEN_STEPS,
) -> DecodeResult:
    """LLMA decoding to the end; `on_chunk` sees each verified chunk as it lands."""
    result = DecodeResult()
    for chunk in llma_stream(model, prompt_ids, references, policy, options, result, steps):
        if on_chunk is not None:
            on_chunk(chunk)
    return result


def _matching_prefix_len(draft: list[int], choices: list[int]) -> int:
    n = 0
    while n < len(draft) and draft[n] == choices[n]:
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
