"""LLMA must return exactly the greedy tokens, whatever the references hold.

These properties test the algorithm with one-token steps, on the tiny model in float64: there a verification's
rows and a one-token step's row round alike to far below any gap between two logits. In float32 they can
differ in the last bit (a near-tie of 2e-6 between two tokens was found), which is why the engine decodes in
fixed-width steps wherever it can; tests/decoding/test_invariance.py and test_packed.py check that path.
"""

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from decoding import (
    OUTPUT_SOURCE,
    PROMPT_SOURCE,
    AdaptiveCopyPolicy,
    CostCurve,
    FixedCopyPolicy,
    LlmaOptions,
    greedy_generate,
    llma_generate,
    llma_stream,
)

VOCAB = 64
CURVE = CostCurve(sizes=(1, 2, 4, 8, 16, 32, 64), seconds=(0.110, 0.170, 0.180, 0.200, 0.220, 0.260, 0.420))
POLICIES = [
    AdaptiveCopyPolicy(cost=CURVE),
    FixedCopyPolicy(match_len=1, copy_len=15),
    FixedCopyPolicy(match_len=2, copy_len=4),
    FixedCopyPolicy(match_len=1, copy_len=1),
    AdaptiveCopyPolicy(cost=CURVE, prior_by_match_len=(0.95,), prior_continuing=0.99),  # drafts eagerly
]


@pytest.fixture(scope="module")
def tiny_model():
    from tests.conftest import make_tiny_llama

    return make_tiny_llama().double()


tokens = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=24)
fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def reference_kinds(greedy: list[int], prompt: list[int], rng: random.Random, junk: list[int]) -> list[list[int]]:
    """Helpful, partial, near-miss, adversarial and oversized references built from the true answer."""
    near_miss = list(greedy)
    if near_miss:
        near_miss[rng.randrange(len(near_miss))] = rng.randrange(VOCAB)
    shuffled = list(greedy)
    rng.shuffle(shuffled)
    return [
        greedy,
        greedy[: len(greedy) // 2],
        greedy[len(greedy) // 3 :],
        near_miss,
        shuffled,
        junk,
        prompt + greedy,
        greedy * 3 + junk,  # longer than the budget
    ]


@fast
@given(prompt=tokens, junk=tokens, budget=st.integers(1, 40), seed=st.integers(0, 10**6),
       policy=st.sampled_from(POLICIES), picks=st.lists(st.integers(0, 7), max_size=5))
def test_llma_equals_greedy_for_any_references(tiny_model, prompt, junk, budget, seed, policy, picks):
    greedy = greedy_generate(tiny_model, prompt, budget).tokens
    kinds = reference_kinds(greedy, prompt, random.Random(seed), junk)
    references = [kinds[i] for i in picks]
    out = llma_generate(tiny_model, prompt, references, policy, LlmaOptions(budget))
    assert out.tokens == greedy


@fast
@given(prompt=tokens, budget=st.integers(2, 40), eos_at=st.integers(0, 39), policy=st.sampled_from(POLICIES))
def test_stops_at_eos_like_greedy_even_when_references_run_past_it(tiny_model, prompt, budget, eos_at, policy):
    free_run = greedy_generate(tiny_model, prompt, budget).tokens
    eos = free_run[min(eos_at, len(free_run) - 1)]
    greedy = greedy_generate(tiny_model, prompt, budget, eos_token_id=eos).tokens
    assert greedy[-1] == eos or len(greedy) == budget
    assert eos not in greedy[:-1]
    out = llma_generate(tiny_model, prompt, [free_run, free_run + [eos] * 5], policy, LlmaOptions(budget, eos))
    assert out.tokens == greedy


@fast
@given(prompt=tokens, budget=st.integers(1, 30), policy=st.sampled_from(POLICIES))
def test_stats_are_consistent(tiny_model, prompt, budget, policy):
    greedy = greedy_generate(tiny_model, prompt, budget).tokens
    references = [greedy, prompt]
    out = llma_generate(tiny_model, prompt, references, policy, LlmaOptions(budget))
    assert len(out.tokens) <= budget
    assert out.copied_tokens == sum(run.length for run in out.copied_runs) <= out.drafted_tokens
    assert out.forward_passes + out.copied_tokens == len(out.tokens)  # each pass adds one token of its own
    for run in out.copied_runs:
        source = {PROMPT_SOURCE: prompt, OUTPUT_SOURCE: out.tokens}.get(run.source) or references[run.source]
        copied = out.tokens[run.out_start : run.out_start + run.length]
        assert copied == source[run.ref_start : run.ref_start + run.length]


def test_oracle_reference_needs_few_forward_passes(tiny_model):
    prompt = list(range(10))
    greedy = greedy_generate(tiny_model, prompt, 60)
    out = llma_generate(tiny_model, prompt, [greedy.tokens], FixedCopyPolicy(1, 15), LlmaOptions(60))
    assert out.tokens == greedy.tokens
    assert out.forward_passes <= 6 < greedy.forward_passes


def test_streamed_chunks_add_up_to_the_reply(tiny_model):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    greedy = greedy_generate(tiny_model, prompt, 40).tokens
    chunks = list(llma_stream(tiny_model, prompt, [greedy], FixedCopyPolicy(1, 8), LlmaOptions(40)))
    assert [t for c in chunks for t in c.tokens] == greedy
    assert any(len(c.tokens) > 1 for c in chunks)  # copied runs land many tokens at once
    assert chunks[-1].result.tokens == greedy


def test_stopping_a_stream_early_keeps_a_consistent_prefix(tiny_model):
    prompt = [7, 7, 1, 2]
    greedy = greedy_generate(tiny_model, prompt, 40).tokens
    stream = llma_stream(tiny_model, prompt, [greedy], POLICIES[0], LlmaOptions(40))
    first = next(stream)
    stream.close()  # what the stop button does
    assert first.result.tokens == greedy[: len(first.result.tokens)]


def test_zero_budget_and_bad_input(tiny_model):
    assert llma_generate(tiny_model, [1, 2], [[1, 2, 3]], POLICIES[0], LlmaOptions(0)).tokens == []
    assert greedy_generate(tiny_model, [1, 2], 0).forward_passes == 0
    with pytest.raises(ValueError):
        llma_generate(tiny_model, [], [], POLICIES[0], LlmaOptions(5))
    with pytest.raises(ValueError):
        greedy_generate(tiny_model, [1], -1)


@fast
@given(prompt=tokens, junk=tokens, budget=st.integers(1, 30), policy=st.sampled_from(POLICIES))
@example(prompt=[54, 54], junk=[0], budget=20, policy=POLICIES[1])  # a float32 near-tie: fine in float64
def test_replay_simulation_makes_the_same_decisions_as_the_model(tiny_model, prompt, junk, budget, policy):
    from decoding.simulate import simulate_llma

    greedy = greedy_generate(tiny_model, prompt, budget).tokens
    references = [greedy[1:], junk, greedy[: len(greedy) // 2] + junk]
    real = llma_generate(tiny_model, prompt, references, policy, LlmaOptions(budget))
    sim = simulate_llma(prompt, references, greedy, policy, CURVE)
    assert (sim.result.forward_passes, sim.result.copied_tokens) == (real.forward_passes, real.copied_tokens)
    assert sim.result.copied_runs == real.copied_runs
