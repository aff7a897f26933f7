"""The configuration `make run` uses on a bf16-capable CPU: the bundled model in bfloat16 on the packed forward,
at each width the engine may choose (4, 8, 16); and transformers' forward in bfloat16 at 8, which runs for
architectures the packed forward does not cover."""

import pytest
import torch

from decoding import (
    AdaptiveCopyPolicy,
    CostCurve,
    FixedCopyPolicy,
    LlmaOptions,
    StepConfig,
    greedy_generate,
    llma_generate,
    load_model,
    pack_model,
)

from .invariance import differing_positions
from .test_bundled_model import QUESTIONS, chat_ids

pytestmark = pytest.mark.slow

FLAT = CostCurve(sizes=(8,), seconds=(0.04,), step_width=8)


CONFIGS = [("packed", 4), ("packed", 8), ("packed", 16), ("transformers", 8)]


@pytest.fixture(scope="module")
def bundled_bf16_model():
    return load_model(dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def packed_bf16(bundled_bf16_model):
    return pack_model(bundled_bf16_model[0])


@pytest.fixture(params=CONFIGS, ids=[f"{forward}-w{width}" for forward, width in CONFIGS])
def bundled_bf16(request, bundled_bf16_model, packed_bf16):
    forward, width = request.param
    model, tokenizer = bundled_bf16_model
    return (packed_bf16 if forward == "packed" else model), tokenizer, StepConfig(width=width)


def test_logits_are_bit_identical_in_every_row_of_a_block(bundled_bf16):
    model, tokenizer, steps = bundled_bf16
    text = " ".join(f"Q: {q} A: Open Settings, then Security, and follow the steps shown." for q in QUESTIONS * 4)
    ids = tokenizer(text)["input_ids"][:300]  # positions grow past several hundred tokens
    assert len(ids) == 300
    for prompt_len in (20, 133):
        assert differing_positions(model, ids, prompt_len, steps) == [], prompt_len


def test_llma_equals_fixed_width_greedy_with_hostile_references(bundled_bf16):
    model, tokenizer, steps = bundled_bf16
    eos = tokenizer.eos_token_id
    prompts = [chat_ids(tokenizer, q) for q in QUESTIONS[:3]]
    answers = [greedy_generate(model, ids, 40, eos, steps=steps).tokens for ids in prompts]
    for i, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        changed = [t if k % 7 != 3 else answers[(i + 1) % 3][0] for k, t in enumerate(answer)]
        for references in ([answer], [changed], [answers[(i + 1) % 3]], [prompt], []):
            for policy in (AdaptiveCopyPolicy(cost=FLAT), FixedCopyPolicy(1, 15)):
                out = llma_generate(model, prompt, references, policy, LlmaOptions(40, eos), steps=steps)
                assert out.tokens == answer, (i, policy)
