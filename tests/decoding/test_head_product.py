"""The lane library's head product (decoding/csrc/head_product.cpp): x @ w.T for bf16 weights, each output one chain
of fp32 FMAs over the inputs in order, so each row's bits are its own.

The LM head runs on it where PyTorch's bf16 products are emulated (decoding/packing.py, bf16_emulated). A row's
product must be that chain exactly, rounded to bf16 once, and must not change with the rows sharing the call
(blocks of up to 8 rows, tiles side by side), their order, or the threads. Whole replies with it, alone and in
random company, are compared in test_batching.py.
"""

import random
from dataclasses import replace

import pytest
import torch

from decoding import StepConfig, greedy_generate
from decoding.batch_probe import short_block_mismatches
from decoding.cost_model import machine_key
from decoding.packed import PackedLlama
from decoding.recipe import DecodeRecipe
from decoding.weights import lane_head_refusal, lane_head_weight

from .invariance import differing_positions, make_tiny_model
from .row_company import rows_alone_and_company_mismatches
from .test_invariance import CONTEXT_LEN, WINDOWS, hostile_mismatches, random_ids

STEPS = StepConfig(width=8, cache_len=512)

REFUSAL = lane_head_refusal(torch.zeros(16, 32, dtype=torch.bfloat16))
pytestmark = pytest.mark.skipif(REFUSAL is not None, reason=f"{REFUSAL}")


def fma_chains(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each output as the kernel computes it: acc = fp32(x_i * w_i + acc) for i = 0.. in turn, then bf16. A product
    of two bf16 values is exact in float64 and so is its sum with an fp32 value of like size, so rounding that sum
    to fp32 is the fused multiply-add's one rounding."""
    xs, ws = x.double(), weight.double()
    acc = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.float32)
    for i in range(x.shape[1]):
        acc = (xs[:, i : i + 1] * ws[:, i] + acc.double()).float()
    return acc.to(torch.bfloat16)


@torch.inference_mode()
@pytest.mark.parametrize(("n", "k"), [(16, 8), (48, 96), (160, 576)])
def test_each_output_is_one_fma_chain_over_the_inputs_in_order(n, k):
    torch.manual_seed(n + k)
    weight = (torch.randn(n, k) * 0.05).to(torch.bfloat16)
    x = torch.randn(11, k).to(torch.bfloat16)
    x[3] = 0.0
    got = lane_head_weight(weight)(x)
    assert got.dtype == torch.bfloat16 and got.shape == (11, n)
    assert torch.equal(got.view(torch.int16), fma_chains(x, weight).view(torch.int16))


@torch.inference_mode()
def test_a_row_s_product_is_the_same_alone_in_any_company_order_and_threads():
    rng = random.Random(5)
    torch.manual_seed(5)
    weight = lane_head_weight((torch.randn(64, 96) * 0.05).to(torch.bfloat16))
    x = torch.randn(40, 96).to(torch.bfloat16)
    x[7, 3] = float("nan")
    alone, mismatches = rows_alone_and_company_mismatches(weight, x, rng)
    assert mismatches == []
    assert alone[7].isnan().all() and not alone[6].isnan().any()


def test_the_lane_head_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="outputs in 16s"):
        lane_head_weight(torch.zeros(24, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bf16"):
        lane_head_weight(torch.zeros(32, 32))
    weight = lane_head_weight(torch.zeros(32, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="do not fit together"):
        weight(torch.zeros(2, 32, dtype=torch.bfloat16))


@torch.inference_mode()
def test_the_lane_head_is_chosen_where_bf16_is_emulated_and_recorded(monkeypatch):
    model = make_tiny_model("llama", torch.bfloat16, seed=2)
    monkeypatch.setattr("decoding.packing.onednn_has_bf16", lambda: False)
    emulated = PackedLlama(model, weights="q4")
    assert emulated.packing.lane_head and emulated.prefill_weights == "q4"
    assert emulated.decode_part.head is emulated.prompt_part.head  # one head for steps and prompts
    # Native bf16 as the packing decides it; what packs the dense weights stays this CPU's (oneDNN refuses bf16
    # where it has no bf16 kernels, as on an AVX2 CPU or one held to AVX2).
    monkeypatch.undo()
    monkeypatch.setattr("decoding.packing.bf16_emulated", lambda weights, dtype: False)
    assert not PackedLlama(model, weights="q4").packing.lane_head
    assert not PackedLlama(model, weights="int8", lane_kernel=True).packing.lane_head
    monkeypatch.setattr("decoding.packing.bf16_emulated", lambda weights, dtype: weights == "q4")
    odd = make_tiny_model("llama", torch.bfloat16, seed=2, vocab_size=170)  # not in 16s: PyTorch's head, no refusal
    assert not PackedLlama(odd, weights="q4").packing.lane_head
    with pytest.raises(ValueError, match="outputs in 16s"):
        PackedLlama(odd, weights="q4", lane_head=True)
    monkeypatch.setattr("decoding.packing.bf16_emulated", lambda weights, dtype: False)
    own = PackedLlama(model, weights="q4", lane_head=True)  # as Verify rebuilds a reply's packing
    tile = torch.ops.llma.head_tile()  # outputs a tile: 16 on AVX-512, 8 on AVX2
    assert own.packing.lane_head and own.decode_part.head.data.shape == (model.lm_head.weight.shape[0] // tile,
                                                                           model.lm_head.weight.shape[1] * tile)
    with pytest.raises(ValueError, match="lane head"):
        PackedLlama(make_tiny_model("llama", torch.float32), lane_head=True)
    # It rounds a reply otherwise, so the recipe, each reply's stats (Verify) and the cost curves' keys carry it.
    recipe = DecodeRecipe.of(own.packing, 8)
    assert recipe.lane_head and DecodeRecipe.from_json(recipe.to_json()).packing == own.packing
    assert "lane-library head" in recipe.describe()
    assert not DecodeRecipe.from_json({k: v for k, v in recipe.to_json().items() if k != "lane_head"}).lane_head
    assert machine_key(own) != machine_key(PackedLlama(model, weights="q4", lane_head=False))


@torch.inference_mode()
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_with_the_lane_head_every_row_keeps_its_bits_and_llma_equals_greedy(arch):
    """A q4 model with the lane head: row 0 of a padded step equals every row of a block, a short block its padded
    rows, and LLMA with hostile references its greedy, bit for bit."""
    model = PackedLlama(make_tiny_model(arch, torch.bfloat16, seed=1), weights="q4", lane_head=True)
    ids = random_ids(seed=len(arch), n=CONTEXT_LEN)
    for width, prompt_len, end in WINDOWS:
        assert differing_positions(model, ids[:end], prompt_len, StepConfig(width, cache_len=512)) == [], width
    assert short_block_mismatches(model, 4) == [] and short_block_mismatches(model, 8) == []
    prompt = random_ids(seed=7, n=12)
    greedy = greedy_generate(model, prompt, 60, steps=STEPS).tokens
    for steps in (STEPS, replace(STEPS, padded=False)):
        assert greedy_generate(model, prompt, 60, steps=steps).tokens == greedy
        assert hostile_mismatches(model, prompt, greedy, steps, seed=3) == []
