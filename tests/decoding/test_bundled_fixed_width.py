"""The configuration `make run` uses on this machine: the bundled model in the dtype it picks (bfloat16 where the
CPU has bf16 kernels or AVX2, else float32) on the packed forward, in each weight format and at each width the
engine may choose (the int formats need bfloat16; every width in tests/formats.py's format). transformers'
forward in bfloat16, which runs for architectures the packed forward does not cover (never for the bundled Llama),
is checked on those architectures in test_invariance.py."""

import pytest
import torch

from decoding import (
    RECOMMENDED_REPETITION_RULE,
    AdaptiveCopyPolicy,
    CostCurve,
    FixedCopyPolicy,
    LlmaOptions,
    StepConfig,
    greedy_generate,
    llma_generate,
    load_model,
)
from decoding.batch_probe import short_blocks_keep_their_bits
from decoding.engine import pack_model
from tests.formats import EMULATED_BF16, RUN_DTYPE, RUN_WEIGHTS

from .invariance import differing_positions
from .test_bundled_model import QUESTIONS, chat_ids

pytestmark = pytest.mark.slow

FLAT = CostCurve(sizes=(8,), seconds=(0.04,), step_width=8)


# (weights, width): every width in STEP_WIDTHS for dense weights; the int formats, whose steps grow dearer with
# their rows, at the narrower widths (int4 chose W=2 on an Intel Xeon without AMX, where 4 int8 rows cost 1.3x one).
DTYPE = RUN_DTYPE
INT_SHAPES = [("int8", 2), ("int4", 2), ("int4", 4)]
NO_INT = pytest.mark.skipif(DTYPE != torch.bfloat16, reason="int formats need bfloat16 (no kernels here)")
# Where bf16 is emulated, PyTorch's int kernels widen to it at 2-3x q4's cost, and `auto` never picks them: their
# minutes go to q4's widths, and the tiny models' tests (test_invariance.py) keep their bits checked there.
EMULATED = pytest.mark.skipif(EMULATED_BF16, reason="int8 and int4 on emulated bf16: auto never picks them here")
SHAPES = [pytest.param((RUN_WEIGHTS, w), id=f"packed-{RUN_WEIGHTS}-w{w}") for w in (2, 4, 8, 16)] + [
    pytest.param(shape, marks=[NO_INT, EMULATED], id=f"packed-{shape[0]}-w{shape[1]}")  # skipped, said why
    for shape in INT_SHAPES]
# The formats whose short blocks may run unpadded: the int kernels on the Xeons; q4, the format served, where bf16
# is emulated.
UNPADDED_SHAPES = [(RUN_WEIGHTS, 4)] if EMULATED_BF16 else INT_SHAPES


@pytest.fixture(scope="module")
def bundled_model():
    return load_model(dtype=DTYPE)


@pytest.fixture(scope="module")
def packed_as_run(bundled_model):
    packed = {}  # by weight format, packed when first asked for

    def in_format(weights: str):
        if weights not in packed:
            packed[weights] = pack_model(bundled_model[0], weights=weights)
        return packed[weights]

    return in_format


@pytest.fixture(params=SHAPES)
def bundled_as_run(request, bundled_model, packed_as_run):
    weights, width = request.param
    return packed_as_run(weights), bundled_model[1], StepConfig(width=width)


def test_logits_are_bit_identical_in_every_row_of_a_block(bundled_as_run):
    model, tokenizer, steps = bundled_as_run
    text = " ".join(f"Q: {q} A: Open Settings, then Security, and follow the steps shown." for q in QUESTIONS * 4)
    ids = tokenizer(text)["input_ids"][:300]  # positions grow past several hundred tokens
    assert len(ids) == 300
    # 70 positions from 230 on: every row of a block, across the key granule at 256; at most 4 shifts a width
    # (every row still lands on ~17 positions at W=16), which keeps W=16 within the suite's budget
    shifts = range(0, steps.width, max(1, steps.width // 4))
    assert differing_positions(model, ids, 230, steps, shifts) == []


def test_llma_equals_fixed_width_decoding_under_the_apps_rule_with_hostile_references(bundled_as_run):
    """The app's decoding rule (DRY and the stop rule) decoded step by step, and LLMA under it, agree."""
    model, tokenizer, steps = bundled_as_run
    eos = tokenizer.eos_token_id
    rule = RECOMMENDED_REPETITION_RULE.for_tokenizer(eos, tokenizer)  # the app's, its grounded numbers included
    i = steps.width.bit_length() % 2  # one question per width, both questions over the widths
    prompt, other = (chat_ids(tokenizer, q) for q in (QUESTIONS[i], QUESTIONS[1 - i]))
    answer = greedy_generate(model, prompt, 40, eos, steps=steps, repetition=rule).tokens
    changed = [t if k % 7 != 3 else other[-1] for k, t in enumerate(answer)]
    for references in ([answer], [changed], [answer[:12] * 4, other, prompt]):
        for policy in (AdaptiveCopyPolicy(cost=FLAT), FixedCopyPolicy(1, 15)):
            options = LlmaOptions(40, eos, repetition=rule)
            out = llma_generate(model, prompt, references, policy, options, steps=steps)
            assert out.tokens == answer, (references, policy)


@NO_INT
@pytest.mark.parametrize(("weights", "width"), UNPADDED_SHAPES)
def test_unpadded_short_blocks_give_the_padded_replies_where_the_probe_allows(packed_as_run, bundled_model,
                                                                              weights, width):
    """Where the start-up probe finds that a row keeps its bits in a shorter block (the int kernels on the
    Xeons, q4 on AVX2), the engine runs greedy steps and short drafts unpadded: the replies must be the padded ones."""
    model, tokenizer = packed_as_run(weights), bundled_model[1]
    if not short_blocks_keep_their_bits(model, width):
        pytest.skip("this CPU's kernels change a row's bits with the block's length: its steps stay padded")
    eos = tokenizer.eos_token_id
    rule = RECOMMENDED_REPETITION_RULE.for_tokenizer(eos, tokenizer)
    padded, unpadded = StepConfig(width=width), StepConfig(width=width, padded=False)
    prompt, other = chat_ids(tokenizer, QUESTIONS[width % 2]), chat_ids(tokenizer, QUESTIONS[1 - width % 2])
    answer = greedy_generate(model, prompt, 40, eos, steps=padded, repetition=rule).tokens
    assert greedy_generate(model, prompt, 40, eos, steps=unpadded, repetition=rule).tokens == answer
    changed = [t if k % 5 != 2 else other[-1] for k, t in enumerate(answer)]
    for references in ([answer], [changed], [answer[:12] * 4, other, prompt]):
        options = LlmaOptions(40, eos, repetition=rule)
        out = llma_generate(model, prompt, references, FixedCopyPolicy(1, 15), options, steps=unpadded)
        assert out.tokens == answer, references
