"""The lane kernel (decoding/csrc/lane_attention.cpp): attention as SDPA computes it, each row's bits its own.

The packed forward's decode steps attend through it wherever it builds, so every bitwise test of replies alone
against replies in company runs through it; these tests check it against SDPA (the same attention, other sums)
and its bits against changes of company, block, lane order and threads, with the AVX-512 paths (head_dim 64 and
128: scores 16 keys at a time) and the plain one (head_dim 16) covered, sliding windows too.
"""

import random

import pytest
import torch

from decoding import FixedCopyPolicy, LlmaOptions, PackedLlama, StepConfig, greedy_generate, llma_generate
from decoding.lane_kernel import kernel_paths, lane_kernel_refusal
from decoding.packed import Lane

from .invariance import make_tiny_model
from .test_invariance import random_ids

pytestmark = pytest.mark.skipif(lane_kernel_refusal() is not None, reason=f"{lane_kernel_refusal()}")


def rotary_tables(length: int, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.arange(length)[:, None] * (10000.0 ** (-torch.arange(dim // 2) / (dim // 2)))[None]
    angles = torch.cat([angles, angles], -1)
    half = dim // 2
    signed_sin = torch.cat([-angles.sin()[:, :half], angles.sin()[:, half:]], -1)
    return angles.cos().to(dtype).contiguous(), signed_sin.to(dtype).contiguous()


def attend(rows: list[torch.Tensor], caches: list[tuple], starts: list[int], heads: int, kv_heads: int,
           window: int = -1) -> list[torch.Tensor]:
    """Each lane's rows through one kernel call; caches (keys, values) are written in place."""
    dim = caches[0][0].shape[-1]
    cos, sin = rotary_tables(caches[0][0].shape[2], dim, rows[0].dtype)
    out = torch.ops.llma.lane_attention(
        torch.cat(rows), cos, sin, [c[0] for c in caches], [c[1] for c in caches], [r.shape[0] for r in rows],
        starts, heads, kv_heads, window, dim**-0.5,
    )
    return list(out.split([r.shape[0] for r in rows]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dim", [64, 128, 16])
@pytest.mark.parametrize("window", [-1, 37])
def test_a_row_s_bits_do_not_depend_on_its_block_its_company_their_order_or_the_threads(dtype, dim, window):
    heads, kv_heads, cache_len = 6, 2, 320
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    lanes = []
    for _ in range(6):
        cache = [torch.randn(1, kv_heads, cache_len, dim, generator=gen, dtype=dtype) for _ in range(2)]
        start, n = rng.randrange(0, 250), rng.randrange(1, 9)
        lanes.append((cache, start, torch.randn(n, (heads + 2 * kv_heads) * dim, generator=gen, dtype=dtype)))

    def fresh(cache):
        return tuple(t.clone() for t in cache)

    # each row alone, in a block of one, one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = []
        for cache, start, rows in lanes:
            own = fresh(cache)
            alone.append(torch.cat([attend([rows[t : t + 1]], [own], [start + t], heads, kv_heads, window)[0]
                                    for t in range(rows.shape[0])]))
    finally:
        torch.set_num_threads(threads)
    torch.set_num_threads(2)
    try:
        for order in (list(range(6)), [4, 1, 5, 0, 3, 2], [2, 5]):
            together = attend([lanes[j][2] for j in order], [fresh(lanes[j][0]) for j in order],
                              [lanes[j][1] for j in order], heads, kv_heads, window)
            for j, out in zip(order, together, strict=True):
                assert torch.equal(out, alone[j]), (order, j)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("window", [-1, 5, 21])
@pytest.mark.parametrize("dim", [16, 64, 128])
def test_the_kernel_attends_over_what_sdpa_attends_over(window, dim):
    """Against a plain softmax attention in float64: the same keys (causal, sliding window), rotary and GQA; rows
    whose keys start and end inside a block of 16 (head_dim 64 and 128 score 16 keys at a time)."""
    heads, kv_heads, cache_len, start, n = 4, 2, 96, 41, 13
    gen = torch.Generator().manual_seed(1)
    keys, values = (torch.randn(1, kv_heads, cache_len, dim, generator=gen) for _ in range(2))
    qkv = torch.randn(n, (heads + 2 * kv_heads) * dim, generator=gen)
    cos, sin = rotary_tables(cache_len, dim, torch.float32)
    rotate = lambda x, pos: x * cos[pos] + x.roll(dim // 2, -1) * sin[pos]  # noqa: E731
    expected_keys, expected_values = keys.clone().double(), values.clone().double()
    q = qkv[:, : heads * dim].view(n, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].view(n, kv_heads, dim)
    v = qkv[:, (heads + kv_heads) * dim :].view(n, kv_heads, dim)
    for t in range(n):
        expected_keys[0, :, start + t] = rotate(k[t], start + t).double()
        expected_values[0, :, start + t] = v[t].double()
    expected = torch.zeros(n, heads, dim, dtype=torch.float64)
    for t in range(n):
        pos = start + t
        lo = max(0, pos - window + 1) if window > 0 else 0
        for h in range(heads):
            kv = h // (heads // kv_heads)
            scores = expected_keys[0, kv, lo : pos + 1] @ rotate(q[t, h], pos).double() * dim**-0.5
            expected[t, h] = scores.softmax(-1) @ expected_values[0, kv, lo : pos + 1]
    got = attend([qkv], [(keys, values)], [start], heads, kv_heads, window)[0]
    assert torch.allclose(keys.double(), expected_keys, atol=1e-5)
    assert torch.allclose(values.double(), expected_values)
    assert torch.allclose(got.double().view(n, heads, dim), expected, atol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2"])
def test_packed_steps_through_the_kernel_match_steps_through_sdpa(arch):
    """The same model's logits either way, to fp32 rounding, prefills too; a kernel packing that prefills
    through SDPA (as replies made before prompts moved to the kernel) prefills bit for bit as the SDPA one."""
    overrides = {"sliding_window": 7} if arch == "mistral" else {}
    source = make_tiny_model(arch, torch.float32, seed=2, **overrides)
    by_kernel, by_sdpa = PackedLlama(source, lane_kernel=True), PackedLlama(source, lane_kernel=False)
    steps_only = PackedLlama(source, lane_kernel=True, prefill_attention="sdpa")
    assert by_kernel.lane_kernel and not by_sdpa.lane_kernel
    assert (by_kernel.prefill_attention, by_sdpa.prefill_attention) == ("kernel", "sdpa")
    ids = torch.tensor(random_ids(seed=3, n=50))
    results = []
    for model in (by_kernel, by_sdpa, steps_only):
        cache = model.new_cache(128)
        prefill = model.prefill(ids[:40], 0, cache, 64, chunked=False)
        step = model.forward_lanes([Lane(ids[40:], 40, cache, 64)])[0]
        results.append((prefill, step))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-4, rtol=1e-4)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-4, rtol=1e-4)
    assert torch.equal(results[2][0], results[1][0])


@pytest.mark.skipif(kernel_paths() == "scalar", reason="without AVX-512 or AVX2 the kernel scores key by key only")
@pytest.mark.parametrize("dim", [64, 128])
def test_scores_sixteen_keys_at_a_time_have_the_bits_of_scores_key_by_key(dim):
    """Head sizes 64 and 128 score 16 keys at a time on AVX-512, 8 on AVX2 (one transposed reduction for all);
    the replies decoded while the kernel scored key by key must keep their bits, or Verify would fail them."""
    gen = torch.Generator().manual_seed(dim)
    q = torch.randn(7, dim, generator=gen) * 3
    k = torch.cat([torch.randn(37, dim, generator=gen) * 3,
                   torch.randn(16, dim, generator=gen).bfloat16().float(),  # keys as a bf16 cache holds them
                   torch.zeros(2, dim), torch.full((1, dim), 1e-30), torch.full((1, dim), 3e38)])
    by_sixteen = torch.ops.llma.key_scores(q, k, True)
    key_by_key = torch.ops.llma.key_scores(q, k, False)
    assert torch.equal(by_sixteen.view(torch.int32), key_by_key.view(torch.int32))  # every bit, inf and signed 0
    assert torch.allclose(by_sixteen[:, :37], q @ k[:37].T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_kernel_s_rms_norm_is_f_rms_norm_and_each_row_its_own(dtype):
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(13, 576, generator=gen) * 3).to(dtype)
    weight = torch.randn(576, generator=gen).to(dtype)
    got = torch.ops.llma.rms_norm(x, weight, 1e-5)
    expected = torch.nn.functional.rms_norm(x.double(), [576], weight.double(), 1e-5)
    assert torch.allclose(got.double(), expected, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-5)
    alone = torch.cat([torch.ops.llma.rms_norm(x[r : r + 1].contiguous(), weight, 1e-5) for r in range(13)])
    assert torch.equal(alone, got)  # 13 rows run on threads, one row alone does not


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_drafts_across_key_granules_keep_llma_equal_to_greedy_in_fewer_forwards(dtype):
    """Through the kernel a block may cross a key granule (StepConfig.cross_granules): the reply is greedy's,
    bit for bit, with the greedy reply itself and junk as references, and a draft is no longer cut in two there."""
    model = PackedLlama(make_tiny_model("llama", dtype, seed=5), lane_kernel=True)
    prompt = random_ids(seed=11, n=21)
    cut, whole = (StepConfig(8, cache_len=256, key_granule=16, cross_granules=cross) for cross in (False, True))
    greedy = greedy_generate(model, prompt, 80, None, steps=whole).tokens
    assert greedy == greedy_generate(model, prompt, 80, None, steps=cut).tokens
    junk = random_ids(seed=12, n=60)
    passes = {}
    for steps in (cut, whole):
        result = llma_generate(model, prompt, [junk, greedy], FixedCopyPolicy(1, 7), LlmaOptions(80), steps=steps)
        assert result.tokens == greedy
        passes[steps.cross_granules] = result.forward_passes
    assert passes[True] < passes[False]
