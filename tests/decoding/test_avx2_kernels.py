"""The lane library's AVX2 paths, forced with CHATBOT_KERNEL_ISA=avx2 so they run on an AVX-512 machine too.

A process loads one build of the library, so the AVX2 build runs in a child process: there the kernel tests
(each row's bits its own, whatever its block, company and threads; the attention and product they compute; the
argmax) must pass, and its outputs must be the native build's bit for bit, which on an AVX-512 machine holds the
AVX2 paths to the AVX-512 paths' operations lane for lane.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decoding.lane_kernel import ISA_VARIABLE, isa_refusal, kernel_paths, lane_kernel_refusal

ROOT = Path(__file__).resolve().parents[2]
KERNEL_TESTS = [
    "tests/decoding/test_lane_kernel.py",
    "tests/decoding/test_q4_product.py",
    "tests/decoding/test_head_product.py",
    "tests/decoding/test_repetition.py::test_the_float_argmax_picks_what_torchs_own_argmax_picks_ties_and_nans_included",
    "tests/decoding/test_repetition.py::test_the_argmax_kernel_agrees_with_torch_on_rows_full_of_ties_and_is_what_first_argmax_returns",
]

# Where the native build's paths are AVX2's already, the kernel tests run them in this session.
NATIVE_IS_AVX2 = lane_kernel_refusal() is None and kernel_paths() == "avx2"
pytestmark = [
    pytest.mark.skipif(isa_refusal("avx2") is not None, reason=f"{isa_refusal('avx2')}"),
    pytest.mark.skipif(NATIVE_IS_AVX2, reason="the native build runs the AVX2 paths: the kernel tests run them here"),
]


def run_on_avx2(*args: str) -> subprocess.CompletedProcess:
    """`python args` from the repository root with the AVX2 build forced (the first run builds it, ~20 s)."""
    env = {**os.environ, ISA_VARIABLE: "avx2"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_kernel_tests_pass_on_the_avx2_paths():
    child = run_on_avx2("-m", "pytest", "-q", "-p", "no:cacheprovider", *KERNEL_TESTS)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    assert " passed" in child.stdout and " skipped" not in child.stdout, child.stdout[-1000:]


def kernel_outputs() -> dict[str, torch.Tensor]:
    """Every kernel of the library on fixed random inputs: attention (bf16 and fp32, head sizes 16, 64 and 128,
    with and without a window, lanes of 1, 5 and 8 rows), the caches it wrote, scores, RMS norm, argmax, q4 and
    the head product."""
    from decoding.weights import lane_head_refusal, lane_head_weight, q4_refusal, q4_weight
    from tests.decoding.test_lane_kernel import attend

    gen = torch.Generator().manual_seed(0)
    out = {}
    for dtype in (torch.bfloat16, torch.float32):
        for dim in (16, 64, 128):
            for window in (-1, 37):
                heads, kv_heads = 6, 2
                caches = [tuple(torch.randn(1, kv_heads, 320, dim, generator=gen, dtype=dtype) for _ in range(2))
                          for _ in range(3)]
                rows = [torch.randn(n, (heads + 2 * kv_heads) * dim, generator=gen, dtype=dtype) for n in (1, 5, 8)]
                out[f"attention {dtype} {dim} {window}"] = torch.cat(
                    attend(rows, caches, [0, 100, 290], heads, kv_heads, window))
                out[f"keys {dtype} {dim} {window}"] = torch.cat([keys for keys, _ in caches])
        x = (torch.randn(13, 576, generator=gen) * 3).to(dtype)
        out[f"rms_norm {dtype}"] = torch.ops.llma.rms_norm(x, torch.randn(576, generator=gen).to(dtype), 1e-5)
        logits = torch.randn(8, 4099, generator=gen).to(dtype)
        out[f"first_argmax {dtype}"] = torch.tensor(torch.ops.llma.first_argmax(logits))
    for dim in (64, 128):
        q, k = torch.randn(7, dim, generator=gen) * 3, torch.randn(77, dim, generator=gen) * 3
        out[f"key_scores {dim}"] = torch.ops.llma.key_scores(q, k, True)
    if q4_refusal() is None:
        weight = q4_weight((torch.randn(96, 288, generator=gen) * 0.05).bfloat16())  # 9 groups: 4, 4 and 1
        x = torch.randn(11, 288, generator=gen).bfloat16()
        x[0, :40], x[1, ::2], x[2, 5], x[3, 7] = 0.0, -0.0, 1e-39, float("inf")  # zeros' signs, a denormal, NaNs
        out["q4_linear"], out["q4_linear one row"] = weight(x), weight(x[4:5])  # one row alone: its own path
    head = (torch.randn(80, 576, generator=gen) * 0.05).bfloat16()
    if lane_head_refusal(head) is None:
        x = torch.randn(11, 576, generator=gen).bfloat16()
        x[1, 3], x[2, ::2] = float("inf"), -0.0
        out["head_linear"], out["head_linear one row"] = lane_head_weight(head)(x), lane_head_weight(head)(x[4:5])
    return out


@pytest.mark.skipif(lane_kernel_refusal() is not None, reason=f"{lane_kernel_refusal()}")
def test_the_avx2_paths_give_the_native_build_s_bits(tmp_path):
    saved = tmp_path / "avx2.pt"
    child = run_on_avx2("-c", "import sys, torch; from decoding.lane_kernel import kernel_paths; "
                              "from tests.decoding.test_avx2_kernels import kernel_outputs; "
                              "torch.save({'paths': kernel_paths(), **kernel_outputs()}, sys.argv[1])", str(saved))
    assert child.returncode == 0, child.stderr[-3000:]
    on_avx2 = torch.load(saved)
    assert on_avx2.pop("paths") == "avx2"
    native = kernel_outputs()
    assert on_avx2.keys() == native.keys()
    for name, expected in native.items():
        assert torch.equal(bits(on_avx2[name]), bits(expected)), f"{name}: AVX2 differs from native ({kernel_paths()})"


def bits(values: torch.Tensor) -> torch.Tensor:
    """Floats as their bits, so NaNs, infinities and zeros' signs compare too."""
    return values.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}.get(values.dtype, values.dtype))
