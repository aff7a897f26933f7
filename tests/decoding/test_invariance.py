"""Fixed-width steps: a position's logits do not depend on its row in a W-wide forward: LLMA == greedy in any dtype."""

import random

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
    measure_cost_curve,
)
from decoding.cost_model import machine_key
from decoding.reference_index import Match
from decoding.simulate import simulate_llma

from .invariance import CONFIGS, VOCAB, differing_positions, make_tiny_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CONTEXT_LEN = 340  # positions grow past several hundred tokens
# (width, first position, end): each window crosses a key granule (64) and puts every position at every row;
# together they reach from the first position to the 340th.
WINDOWS = [(4, 1, 100), (8, 150, 230), (16, 270, CONTEXT_LEN)]
STEPS = StepConfig(width=8, cache_len=512)
FLAT = CostCurve(sizes=(8,), seconds=(0.04,), step_width=8)
POLICIES = [FixedCopyPolicy(1, 15), FixedCopyPolicy(2, 3), AdaptiveCopyPolicy(cost=FLAT)]


def random_ids(seed: int, n: int, vocab: int = VOCAB) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def hostile_references(greedy: list[int], prompt: list[int], seed: int) -> list[list[list[int]]]:
    """The answer itself, it with a few tokens changed, random tokens, the prompt, none."""
    rng = random.Random(seed)
    changed = list(greedy)
    for i in rng.sample(range(len(changed)), 3):
        changed[i] = (changed[i] + 1) % VOCAB
    return [[greedy], [changed], [random_ids(seed, 50)], [prompt], [], [changed, greedy, prompt]]


def hostile_mismatches(model, prompt: list[int], greedy: list[int], steps: StepConfig, seed: int, policies=POLICIES):
    """(references, policy) wherever LLMA with a hostile reference chose other tokens than `greedy`."""
    options = LlmaOptions(len(greedy))
    return [
        (references, policy)
        for references in hostile_references(greedy, prompt, seed)
        for policy in policies
        if llma_generate(model, prompt, references, policy, options, steps=steps).tokens != greedy
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", CONFIGS)
def test_logits_are_bit_identical_in_every_row_of_a_block(arch, dtype):
    model = make_tiny_model(arch, DTYPES[dtype])
    ids = random_ids(seed=len(arch), n=CONTEXT_LEN)
    for width, prompt_len, end in WINDOWS:  # all three widths hold on every tiny model here
        steps = StepConfig(width, cache_len=512)
        assert differing_positions(model, ids[:end], prompt_len, steps) == [], (width, prompt_len)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", CONFIGS)
def test_llma_equals_fixed_width_greedy_with_hostile_references(arch, dtype):
    model = make_tiny_model(arch, DTYPES[dtype], seed=1)
    prompt = random_ids(seed=7, n=12)
    greedy = greedy_generate(model, prompt, 60, steps=STEPS)
    assert greedy.forward_passes == len(greedy.tokens) == 60  # the prefill, then one W-wide step a token
    assert hostile_mismatches(model, prompt, greedy.tokens, STEPS, seed=3) == []


def test_a_long_draft_is_verified_in_several_blocks(tiny_model):
    prompt = list(range(10))
    greedy = greedy_generate(tiny_model, prompt, 60, steps=STEPS).tokens
    out = llma_generate(tiny_model, prompt, [greedy], FixedCopyPolicy(1, 15), LlmaOptions(60), steps=STEPS)
    assert out.tokens == greedy
    # 59 tokens after the first: 4 verifications of 15 drafts plus one token, 2 blocks each, plus the prefill.
    assert out.forward_passes == 1 + 4 * 2
    replay = simulate_llma(prompt, [greedy], greedy, FixedCopyPolicy(1, 15), FLAT, steps=STEPS)
    assert replay.result.forward_passes == out.forward_passes
    assert set(replay.forward_sizes) == {8}


def test_replay_counts_forwards_like_the_model_under_a_step_width(tiny_model):
    prompt = random_ids(seed=5, n=9, vocab=64)  # conftest's tiny Llama
    greedy = greedy_generate(tiny_model, prompt, 40, steps=STEPS).tokens
    changed = [t if i % 11 else (t + 1) % 64 for i, t in enumerate(greedy)]
    for policy in POLICIES:
        real = llma_generate(tiny_model, prompt, [changed, prompt], policy, LlmaOptions(40), steps=STEPS)
        replay = simulate_llma(prompt, [changed, prompt], greedy, policy, FLAT, steps=STEPS)
        assert (replay.result.forward_passes, replay.result.copied_runs) == (real.forward_passes, real.copied_runs)


def test_sliding_window_model_rolls_back_rejected_drafts():
    """A window of 8 over ~60 positions: rejected drafts are cropped without error, in both step shapes."""
    model = make_tiny_model("mistral", torch.float32, seed=2, sliding_window=8)
    prompt = random_ids(seed=11, n=20)
    for steps in (StepConfig(), STEPS):
        greedy = greedy_generate(model, prompt, 40, steps=steps).tokens
        assert hostile_mismatches(model, prompt, greedy, steps, seed=4) == []


@torch.inference_mode()
def test_a_full_history_cache_still_applies_the_window():
    """Step-by-step logits over the kept history equal one forward of the whole text, and the window matters."""
    windowed = make_tiny_model("mistral", torch.float32, seed=2, sliding_window=8)
    unwindowed = make_tiny_model("mistral", torch.float32, seed=2)
    prompt = random_ids(seed=11, n=20)
    text = prompt + greedy_generate(windowed, prompt, 40, steps=STEPS).tokens  # (60,)
    whole = windowed(input_ids=torch.tensor([text])).logits[0, len(prompt) - 1 : -1]  # (40, V)
    assert whole.argmax(-1).tolist() == text[len(prompt) :]
    assert not torch.allclose(whole, unwindowed(input_ids=torch.tensor([text])).logits[0, len(prompt) - 1 : -1])


def test_a_flat_curve_drafts_up_to_the_step_width(tiny_model):
    curve = measure_cost_curve(tiny_model, context_len=32, repeats=1, steps=STEPS)
    assert (curve.sizes, curve.step_width) == ((8,), 8)
    assert curve.cost(1) == curve.cost(8) == curve.cost(9) / 2 == curve.cost(16) / 2
    drafter = AdaptiveCopyPolicy(cost=curve).start()
    for match_len in (1, 3, 12):
        assert drafter.copy_len(Match(source=0, next_pos=1, match_len=match_len), False, 100) == 7
    assert CostCurve.from_json(curve.to_json()) == curve
    assert machine_key(tiny_model, STEPS) != machine_key(tiny_model)


def test_a_call_that_overflows_the_preallocated_cache_is_refused(tiny_model):
    with pytest.raises(ValueError, match="exceed the KV cache"):
        greedy_generate(tiny_model, list(range(20)), 490, steps=STEPS)
    with pytest.raises(ValueError, match="exceed the KV cache"):
        llma_generate(tiny_model, list(range(20)), [], POLICIES[0], LlmaOptions(490), steps=STEPS)
    with pytest.raises(ValueError):
        StepConfig(width=0)
