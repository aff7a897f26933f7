"""Weight formats of the packed forward: how many bytes a decode step reads.

A decode step on a CPU reads every weight once, so its cost is mostly the model's bytes over the memory
bandwidth the step gets. "dense" keeps the model's own dtype (bf16: 2 bytes a weight), laid out once for
oneDNN. "int8" keeps one signed byte a weight and a scale per output channel; "int4" half a byte and a scale
and an offset per 32 inputs, which is the bundled GGUF's own Q4_1 layout, so its weights come back exactly
(measured: zero error in fp32). Both run PyTorch's weight-only kernels (the ones gpt-fast and torchao use),
which widen the weights to bf16 in registers, so activations stay bf16. "q4" holds the same 4-bit levels, a
step and a low per 32 inputs, for the lane library's own product (decoding/csrc/q4_product.cpp): each row is held
as int8 values and a scale per 32 inputs (llama.cpp's Q8_1), the dot products are integer sums, and a widened
weight serves up to 8 rows, so a forward's rows (drafts, other customers' replies) cost little and one row less
than under PyTorch's int4 kernel (the bundled model's products, AMD EPYC, 2 threads: 1 and 8 rows 1.5 and 4.3 ms;
the AVX2 build 1.8 and 7.0 ms). It needs the built library on a CPU with AVX2 and FMA; AVX512-VNNI and AVX2 give
the same integers, so every build gives the same bits.

Every format computes a row from that row and the weights alone: the same row gives the same bits whichever
other rows share the product (measured per model at start, decoding/batch_probe.py, and by the invariance
tests), which is what keeps LLMA identical to greedy in the same format.
"""

from dataclasses import dataclass
from typing import Optional, Union

import torch

from .lane_kernel import lane_kernel_refusal

WEIGHT_FORMATS = ("dense", "int8", "int4", "q4")
INT4_GROUP = 32  # inputs sharing one scale and offset: Q4_1's block, so the bundled model's weights are exact
INT4_ROWS = 16  # the int4 kernel packs output channels in sixteens
_NO_SCALES = torch.empty(0)


# The kernel a weight runs on. Plain ints, because the scripted decoder layers (decoding/packed.py) branch on them.
ONEDNN = 0  # the model's dtype, prepacked for oneDNN: reordered once instead of on every call
PLAIN = 1  # the model's dtype as it is (off the CPU)
INT8 = 2  # int8 (N, K), a scale per output channel: w = q * scale
INT4 = 3  # 4 bits packed for the CPU kernel, a scale and an offset per INT4_GROUP inputs: w = (q - 8) * d + z
Q4 = 4  # 4 bits for the lane library's product, a step and a low per INT4_GROUP inputs: w = q * step + low
LANE_HEAD = 5  # bf16 in tiles of outputs for the lane library's head product (decoding/csrc/head_product.cpp)
HEAD_TILE = 16  # the lane head's outputs come in these: a whole number of either build's tiles (16 or 8)


@dataclass(frozen=True)
class Weight:
    """One weight (N, K) held for `kernel`: `data`, and for the int kernels its `scales` in the activations' dtype
    ((N,) for int8; (K / group, N, 2) scales and offsets for int4; (N / 16, K / group, 2, 16) steps and lows for
    q4; empty for the dense kernels)."""

    kernel: int
    data: torch.Tensor
    scales: torch.Tensor

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel == Q4:
            return q4_product(x, self.data, self.scales, bias)
        if self.kernel == LANE_HEAD:
            y = torch.ops.llma.head_linear(x, self.data)
            return y if bias is None else y + bias
        return product(self.kernel, x, self.data, self.scales, bias)


def product(kernel: int, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor,
            bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045 (TorchScript reads Optional, not "| None")
    """x @ w.T (+ bias) on the weight's kernel. Written for TorchScript too: the scripted decoder layers compile it."""
    # TorchScript reads no module-level names, so the kernels and INT4_GROUP are spelled out.
    if kernel == 0:  # ONEDNN; its list of scalars for a fused activation (none here) is typed for TorchScript
        no_scalars: list[Optional[Union[int, float, complex]]] = [None]  # noqa: UP007, UP045
        return torch.ops.mkldnn._linear_pointwise(x, data, bias, "none", no_scalars, "")
    if kernel == 1:  # PLAIN
        return torch.nn.functional.linear(x, data, bias)
    if kernel == 2:  # INT8
        y = torch.ops.aten._weight_int8pack_mm(x, data, scales)
    else:  # INT4
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, data, 32, scales)
    return y if bias is None else y + bias


def q4_product(x: torch.Tensor, levels: torch.Tensor, scales: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045 (TorchScript reads Optional)
    """x (M, K) @ w.T (+ bias) on the lane library's q4 product; eager and under TorchScript (Q4DecoderLayers),
    only where q4_refusal() is None: the op must exist."""
    y = torch.ops.llma.q4_linear(x, levels, scales)
    return y if bias is None else y + bias


def q4_refusal() -> str | None:
    """Why this machine cannot run q4 weights, or None: the lane library must be built, with AVX512-BF16 or AVX2."""
    refusal = lane_kernel_refusal()
    if refusal is not None:
        return f"q4 weights run on the lane library: {refusal}"
    if not torch.ops.llma.q4_available():
        return "q4 weights need a CPU with AVX512-BF16, or AVX2 and FMA"
    return None


def lane_head_refusal(weight: torch.Tensor) -> str | None:
    """Why the LM head `weight` (N, K) cannot run on the lane library's bf16 product here, or None."""
    refusal = lane_kernel_refusal()
    if refusal is not None:
        return f"the lane head runs on the lane library: {refusal}"
    if not torch.ops.llma.head_available():
        return "the lane head needs a CPU with AVX-512, or AVX2 and FMA"
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or weight.shape[0] % HEAD_TILE:
        shape = f"{weight.dtype} {tuple(weight.shape)} on {weight.device.type}"
        return f"the lane head takes a bf16 weight on the CPU of outputs in {HEAD_TILE}s, not {shape}"
    return None


def lane_head_weight(weight: torch.Tensor) -> Weight:
    """The LM head (N, K) for the lane library's product: per tile of the build's `head_tile()` outputs, input
    after input, the tile's weights of that input (N / tile, K * tile), the model's bf16 values as they are."""
    refusal = lane_head_refusal(weight)
    if refusal is not None:
        raise ValueError(refusal)
    n, k = weight.shape
    tile = torch.ops.llma.head_tile()  # the build's: 16 outputs on AVX-512, 8 on AVX2
    tiles = weight.detach().view(n // tile, tile, k).transpose(1, 2).contiguous()
    return Weight(LANE_HEAD, tiles.view(n // tile, k * tile), _NO_SCALES)


def format_refusal(weights: str, dtype: torch.dtype, device: torch.device) -> str | None:
    """Why the packed forward cannot hold its weights in `weights` for this model, or None when it can."""
    if weights not in WEIGHT_FORMATS:
        return f"weights must be one of {', '.join(WEIGHT_FORMATS)}, not {weights!r}"
    if weights == "dense":
        return None
    if device.type != "cpu":
        return f"{weights} weights run on the CPU only"
    if dtype != torch.bfloat16:
        return f"{weights} weights need bfloat16 activations (their kernels are slow in float32)"
    return q4_refusal() if weights == "q4" else None


def int4_refusal(weight: torch.Tensor) -> str | None:
    """Why one (N, K) weight cannot be held in int4 (or q4), or None."""
    n, k = weight.shape
    if k % INT4_GROUP or n % INT4_ROWS:
        return f"a {n}x{k} weight (int4 wants inputs in {INT4_GROUP}s and outputs in {INT4_ROWS}s)"
    return None


def pack_weight(weight: torch.Tensor, weights: str, onednn: bool, width_hint: int) -> Weight:
    """`weight` (N, K) in the format `weights`; the model's dtype is the activations' dtype."""
    weight = weight.detach().contiguous()
    if weights == "int8":
        return int8_weight(weight)
    if weights == "int4":
        return int4_weight(weight)
    if weights == "q4":
        return q4_weight(weight)
    if onednn:
        return Weight(ONEDNN, torch.ops.mkldnn._reorder_linear_weight(weight, width_hint), _NO_SCALES)
    return Weight(PLAIN, weight, _NO_SCALES)


def int8_weight(weight: torch.Tensor) -> Weight:
    """Symmetric int8 per output channel, scaled so the channel's largest weight is 127."""
    w = weight.float()
    scales = (w.abs().amax(1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return Weight(INT8, q, scales.to(weight.dtype))


def int4_levels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group of INT4_GROUP inputs its levels 0..15 (N, K), step and low (N, K / group), fp32: the group's
    minimum is level 0, its maximum level 15 (Q4_1's own groups, so the bundled weights land on their levels)."""
    refusal = int4_refusal(weight)
    if refusal is not None:
        raise ValueError(f"cannot hold {refusal} in 4 bits")
    n, k = weight.shape
    groups = weight.float().view(n, k // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    step = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    levels = torch.round((groups - low[..., None]) / step[..., None]).clamp(0, 15).to(torch.int32).view(n, k)
    return levels, step, low


def q4_weight(weight: torch.Tensor) -> Weight:
    """4 bits a weight laid out for q4_product: per tile of 16 output channels and octet of inputs (8o .. 8o+7),
    4 bytes a channel, byte b holding input 8o+b in its low nibble and 8o+4+b in its high one; per tile and group,
    16 steps then 16 lows in bf16."""
    refusal = q4_refusal()  # loads the lane library, whose op the weight runs on
    if refusal is not None:
        raise ValueError(f"cannot hold weights in q4: {refusal}")
    levels, step, low = int4_levels(weight)
    n, k = weight.shape
    octets = levels.to(torch.uint8).view(n // INT4_ROWS, INT4_ROWS, k // 8, 2, 4)
    packed = (octets[..., 0, :] | (octets[..., 1, :] << 4)).transpose(1, 2).contiguous().view(n // INT4_ROWS, -1)
    scales = torch.stack([step, low], -1).to(torch.bfloat16)  # (N, K / group, 2)
    scales = scales.view(n // INT4_ROWS, INT4_ROWS, k // INT4_GROUP, 2).permute(0, 2, 3, 1).contiguous()
    return Weight(Q4, packed, scales)


def int4_weight(weight: torch.Tensor) -> Weight:
    """Asymmetric int4 per group of INT4_GROUP inputs: the group's minimum is level 0, its maximum level 15.

    Q4_1 stores exactly such groups (an offset at the minimum and a step of (max - min) / 15), so weights read
    from a Q4_1 file land on their own levels again."""
    q, step, low = int4_levels(weight)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    # The kernel computes (q - 8) * d + z, so the offset z sits at level 8.
    scales_and_zeros = torch.stack([step.t(), (low + 8 * step).t()], -1).to(weight.dtype).contiguous()
    return Weight(INT4, packed, scales_and_zeros)
