"""The q4 product (decoding/csrc/q4_product.cpp): x @ w.T for 4-bit weights, each row's bits its own.

A row's product must not change with how many rows share the call (the kernel takes rows in blocks of up to 8,
so company moves a row between blocks and block sizes), with their order, or with the threads, and it must be
the product of the rows and weights q4 holds (a row: int8 values and a scale per 32 inputs; a weight: levels, a
step and a low per 32 inputs) to within fp32 sums and the bf16 result's rounding. Whole replies in q4, alone and
in random company, are compared in test_batching.py and test_packed.py.
"""

import random

import pytest
import torch

from decoding.weights import int4_levels, q4_refusal, q4_weight

from .row_company import rows_alone_and_company_mismatches

pytestmark = pytest.mark.skipif(q4_refusal() is not None, reason=f"{q4_refusal()}")


def held_weights(weight: torch.Tensor) -> torch.Tensor:
    """The weights q4 holds for `weight`, in float64: levels times the bf16 step plus the bf16 low."""
    levels, step, low = int4_levels(weight)
    n, k = weight.shape
    step, low = step.to(torch.bfloat16).double(), low.to(torch.bfloat16).double()
    return (levels.double().view(n, k // 32, 32) * step[..., None] + low[..., None]).view(n, k)


def held_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows q4 holds for `x`, in float64: per group of 32 inputs, int8 values (the largest |x| becomes 127,
    rounded to nearest even in fp32) times the group's scale."""
    m, k = x.shape
    groups = x.float().view(m, k // 32, 32)
    largest = groups.abs().amax(-1, keepdim=True)
    full = torch.full_like(largest, 127.0)  # a true division: PyTorch's scalar / tensor multiplies by a reciprocal
    q = torch.round(groups * (full / largest)).nan_to_num(0.0)
    return (q.double() * (largest / full).double()).view(m, k)


@torch.inference_mode()
@pytest.mark.parametrize(("n", "k"), [(16, 32), (48, 96), (576, 1536)])
def test_q4_computes_the_product_of_the_rows_and_weights_it_holds(n, k):
    torch.manual_seed(n + k)
    weight = (torch.randn(n, k) * 0.05).to(torch.bfloat16)
    x = torch.randn(11, k).to(torch.bfloat16)
    x[3, :32] = 0.0  # a group of zeros
    exact = held_rows(x) @ held_weights(weight).t()
    got = q4_weight(weight)(x).double()
    # fp32 sums over k inputs, then the bf16 result: half a bf16 step of the result, plus the sums' own rounding
    largest = x.double().abs().sum(1, keepdim=True) * held_weights(weight).abs().max()
    allowed = exact.abs() * 2.0**-8 + largest * 2.0**-20
    assert ((got - exact).abs() <= allowed).all()
    # and the rows held are the rows to within half a step of 127 per group
    assert ((held_rows(x) - x.double()).abs() <= x.double().abs().view(11, -1, 32).amax(-1).repeat_interleave(
        32, 1) / 254 * (1 + 2.0**-16)).all()


@torch.inference_mode()
def test_a_row_with_an_infinity_gives_nan_and_other_rows_keep_their_values():
    weight = q4_weight((torch.randn(32, 64) * 0.05).to(torch.bfloat16))
    x = torch.randn(3, 64).to(torch.bfloat16)
    alone = weight(x[1:2])
    x[0, 5], x[2, 40] = float("inf"), float("nan")
    got = weight(x)
    assert got[0].isnan().all() and got[2].isnan().all()
    assert torch.equal(got[1:2], alone)


@torch.inference_mode()
def test_a_row_s_product_is_the_same_alone_in_any_company_order_and_threads():
    rng = random.Random(3)
    torch.manual_seed(3)
    weight = q4_weight((torch.randn(96, 128) * 0.05).to(torch.bfloat16))
    x = torch.randn(40, 128).to(torch.bfloat16)
    assert rows_alone_and_company_mismatches(weight, x, rng)[1] == []  # across the kernel's 8-row blocks


def test_q4_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="inputs in 32s"):
        q4_weight(torch.zeros(32, 48, dtype=torch.bfloat16))
    weight = q4_weight(torch.zeros(32, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="do not fit together"):
        weight(torch.zeros(2, 32, dtype=torch.bfloat16))
