"""The decoder layers of the packed forward, run under TorchScript: every layer's arithmetic over the stacked rows of
one or more lanes (replies), given the hidden rows and one typed argument that says what attention reads.

The layers run under TorchScript: the same aten calls, so the same bits, without Python between them.
torch.compile was measured on the same step and rejected: 38-44 s to compile and 48-56 ms a step, twice the eager
forward, with or without freezing (torch 2.13, AMD EPYC without AMX).
"""

import logging
import warnings
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from .packing import LayerWeights, ModelShape
from .weights import product, q4_product

logger = logging.getLogger(__name__)


class LaneInputs(NamedTuple):
    """What every layer's attention reads for the lanes of one forward, built once per forward (PackedLlama): lane
    j's rows are the j-th `sizes` rows of the hidden state, at positions starts[j].., over its own cache."""

    sizes: list[int]  # each lane's rows, stacked in this order (N in all)
    starts: list[int]  # each lane's first position
    key_lens: list[int]  # how many keys each lane attends over (StepConfig.key_len)
    keys: list[list[torch.Tensor]]  # keys[j][i]: lane j's cache of layer i, (1, kv_heads, cache_len, dim)
    values: list[list[torch.Tensor]]
    by_kernel: bool  # attend and normalize through the lane kernel; else SDPA and F.rms_norm, lane by lane
    cos: list[torch.Tensor]  # SDPA: each lane's rotary rows (T, 1, dim), sin signed (RotaryTables); [] by kernel
    sin: list[torch.Tensor]
    masks: list[list[torch.Tensor]]  # SDPA: each lane's mask per attention kind (ModelShape.windows); [] by kernel
    cos_table: torch.Tensor  # by kernel: the whole rotary tables, (L, dim) (RotaryTables)
    sin_table: torch.Tensor
    copy_keys: bool  # SDPA reads a contiguous copy of the keys, not a view strided by the cache's size (prefills)


class LaneBatch(NamedTuple):
    """Every lane of a shared forward laid out as one attention batch, built once per forward
    (PackedLlama._lane_batch): lane j's rows padded to `query_len`, its keys to `key_len`, the padding masked."""

    sizes: list[int]  # each lane's rows, stacked in this order (N in all)
    starts: list[int]  # each lane's first position
    query_len: int  # the most rows of any lane, at least 2 (a lone row is asked twice, as DecoderLayers.attend)
    key_len: int  # the most keys of any lane, rounded up to 16 (the CUDA kernel's mask alignment)
    cos: torch.Tensor  # (N, 1, dim) each stacked row's rotary, as PackedLlama's tables
    sin: torch.Tensor
    masks: list[torch.Tensor]  # per attention kind: (lanes, kv_heads, group * query_len, key_len), 0 or -inf
    query_rows: torch.Tensor  # (lanes * query_len,) the stacked row each padded row asks (a lane's last past its end)
    real_rows: torch.Tensor  # (N,) the padded row that holds each stacked row
    keys: list[list[torch.Tensor]]  # keys[j][i]: lane j's cache of layer i
    values: list[list[torch.Tensor]]


class DecoderLayers(torch.nn.Module):
    """Every decoder layer's arithmetic over the stacked rows of one or more lanes; run under TorchScript.

    The layer products (q/k/v, o, gate/up, down) run once over all rows; attention runs per lane over its own
    cache. These are the aten calls the eager Python forward made before, with the same arguments, so the same
    bits (compared on every architecture, dtype and weight format when it was switched); what TorchScript takes
    away is Python between the calls: a two-row int4 step of the bundled model (30 layers of some 25 calls)
    went from 16.1 to 13.3 ms, side by side, 2 threads, Intel Xeon without AMX.
    """

    kernel: int
    qkv: list[torch.Tensor]  # q, k and v projections stacked: one product
    qkv_scales: list[torch.Tensor]
    qkv_bias: list[Optional[torch.Tensor]]  # noqa: UP045 (TorchScript reads Optional)
    o: list[torch.Tensor]
    o_scales: list[torch.Tensor]
    o_bias: list[Optional[torch.Tensor]]  # noqa: UP045
    gate_up: list[torch.Tensor]  # gate and up projections stacked
    gate_up_scales: list[torch.Tensor]
    down: list[torch.Tensor]
    down_scales: list[torch.Tensor]
    input_norm: list[torch.Tensor]
    post_norm: list[torch.Tensor]
    mask_kind: list[int]  # which of a lane's masks the layer attends with (ModelShape.windows)
    window: list[int]  # the layer's sliding window, -1 for none (the lane kernel's)

    def __init__(self, weights: LayerWeights, shape: ModelShape, device: torch.device) -> None:
        super().__init__()
        self.kernel = weights.kernel
        self.qkv, self.qkv_scales, self.qkv_bias = weights.qkv, weights.qkv_scales, weights.qkv_bias
        self.o, self.o_scales, self.o_bias = weights.o, weights.o_scales, weights.o_bias
        self.gate_up, self.gate_up_scales = weights.gate_up, weights.gate_up_scales
        self.down, self.down_scales = weights.down, weights.down_scales
        self.input_norm, self.post_norm = weights.input_norm, weights.post_norm
        self.mask_kind = list(shape.mask_kind)
        self.window = [-1 if shape.windows[kind] is None else shape.windows[kind] for kind in shape.mask_kind]
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.intermediate, self.eps, self.scaling = shape.intermediate, shape.eps, shape.scaling

    def forward(self, x: torch.Tensor, lanes: LaneInputs) -> torch.Tensor:
        """x (sum of sizes, hidden) through every layer."""
        for i in range(len(self.qkv)):
            h = self.norm(x, self.input_norm[i], lanes.by_kernel)
            qkv = self.linear(h, self.qkv[i], self.qkv_scales[i], self.qkv_bias[i])
            x = self.after_attention(i, x, self.attend_lanes(i, qkv, lanes), lanes.by_kernel)
        return x

    def after_attention(self, i: int, x: torch.Tensor, rows: torch.Tensor, by_kernel: bool) -> torch.Tensor:
        """Layer i's output projection and MLP over x (N, hidden), given its attention rows (N, heads * dim)."""
        x = x + self.linear(rows, self.o[i], self.o_scales[i], self.o_bias[i])
        h = self.norm(x, self.post_norm[i], by_kernel)
        gate_up = self.linear(h, self.gate_up[i], self.gate_up_scales[i], None)
        gated = F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]
        return x + self.linear(gated, self.down[i], self.down_scales[i], None)

    def linear(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
        return product(self.kernel, x, data, scales, bias)

    def norm(self, x: torch.Tensor, weight: torch.Tensor, by_kernel: bool) -> torch.Tensor:
        return F.rms_norm(x, [x.shape[-1]], weight, self.eps)

    def attend_lanes(self, i: int, qkv: torch.Tensor, lanes: LaneInputs) -> torch.Tensor:
        """Layer i's attention output (sum of sizes, heads * dim) for every lane: here an SDPA call per lane."""
        return self.attend_each(i, qkv, lanes)

    def attend_each(self, i: int, qkv: torch.Tensor, lanes: LaneInputs) -> torch.Tensor:
        parts = qkv.split(lanes.sizes)
        attended = [
            self.attend(parts[j], lanes.starts[j], lanes.key_lens[j], lanes.keys[j][i], lanes.values[j][i],
                        lanes.cos[j], lanes.sin[j], lanes.masks[j][self.mask_kind[i]], lanes.copy_keys)
            for j in range(len(lanes.sizes))
        ]
        return attended[0] if len(attended) == 1 else torch.cat(attended)

    def attend(
        self, qkv: torch.Tensor, start: int, key_len: int, keys: torch.Tensor, values: torch.Tensor,
        cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, copy_keys: bool,
    ) -> torch.Tensor:
        """One lane's attention (T, heads * dim) from its rows of the q/k/v product, over its own cache."""
        n_tokens, heads, kv_heads, dim = qkv.shape[0], self.heads, self.kv_heads, self.head_dim
        # q and k take the same rotation, so they are rotated together: (T, heads + kv_heads, dim), and
        # rotate_half(x) * sin is roll(x, half) * signed sin (PackedLlama's rotary tables).
        qk = qkv[:, : (heads + kv_heads) * dim].view(n_tokens, heads + kv_heads, dim)
        qk = torch.addcmul(qk * cos, qk.roll(dim // 2, -1), sin)
        v = qkv[:, (heads + kv_heads) * dim :].view(n_tokens, kv_heads, dim)
        keys[0, :, start : start + n_tokens] = qk[:, heads:].transpose(0, 1)
        values[0, :, start : start + n_tokens] = v.transpose(0, 1)
        q = qk[:, :heads]
        if n_tokens == 1:
            # A lone row is asked twice: SDPA rounds a one-row query unlike the same row among others (measured:
            # 13 of 33 random cases at 2 rows, AMD EPYC), and then a short block alone would not give the bits it
            # gets padded or in company, so every step would have to be padded. Twice, it gives those bits
            # (0 of 600). Its mask has the row twice (PackedLlama._lane_masks).
            q = q.expand(2, heads, dim)
        rows = q.shape[0]
        # The q heads sharing a kv head are stacked as rows of one query (kv_heads, group * T, dim): one
        # product of more rows per kv head runs faster than one per q head (108 vs 138 us at 320 keys).
        q = q.transpose(0, 1).reshape(1, kv_heads, heads // kv_heads * rows, dim)
        k, v = keys[:, :, :key_len], values[:, :, :key_len]
        if copy_keys:  # prefill chunks: bits that cannot depend on the cache's size (StepConfig.prefill_chunk)
            k, v = k.contiguous(), v.contiguous()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)  # (1, kv_heads, group*T, dim)
        return out.view(heads, rows, dim)[:, :n_tokens].transpose(0, 1).reshape(n_tokens, heads * dim)


class KernelDecoderLayers(DecoderLayers):
    """DecoderLayers that attend through the lane kernel, one call per layer for every lane
    (decoding/csrc/lane_attention.cpp), each row's bits its own whatever its company, and normalize each row in
    one pass; where `by_kernel` is off (prompts of a packing that prefills through SDPA: replies made before prompts
    moved to the kernel) they keep SDPA and F.rms_norm."""

    def norm(self, x: torch.Tensor, weight: torch.Tensor, by_kernel: bool) -> torch.Tensor:
        if not by_kernel:
            return F.rms_norm(x, [x.shape[-1]], weight, self.eps)
        return torch.ops.llma.rms_norm(x, weight, self.eps)

    def attend_lanes(self, i: int, qkv: torch.Tensor, lanes: LaneInputs) -> torch.Tensor:
        if not lanes.by_kernel:
            return self.attend_each(i, qkv, lanes)
        return torch.ops.llma.lane_attention(
            qkv, lanes.cos_table, lanes.sin_table, [keys[i] for keys in lanes.keys],
            [values[i] for values in lanes.values], lanes.sizes, lanes.starts, self.heads, self.kv_heads,
            self.window[i], self.scaling,
        )


class Q4DecoderLayers(KernelDecoderLayers):
    """KernelDecoderLayers whose products run the lane library's q4 kernel (decoding/csrc/q4_product.cpp): a
    separate class, because TorchScript compiles every call it sees, and the op exists only where it was built."""

    def linear(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
        return q4_product(x, data, scales, bias)


class BatchedDecoderLayers(DecoderLayers):
    """DecoderLayers whose decode steps attend for every lane in one SDPA call per layer (`forward_batched`), where
    the lane kernel does not run (CUDA): the per-lane path costs some ten kernel launches per lane and layer, and
    on a GPU a shared forward of 8 replies was bound by them (1.33x the throughput of one reply after another on an
    H200, docs/gpu/2026-12-04-nvidia-h200). A reply alone runs the same path, a batch of one with the same padding
    rule, so its rows meet the same kernel with the same per-row arithmetic alone and in company: padded queries
    are rows of their own, padded keys are masked (exp(-inf) adds an exact zero), which the start-up probe checks
    (decoding/batch_probe.py). Only the cache writes stay per lane: each reply's cache is a tensor of its own."""

    efficient: bool  # call CUDA's memory-efficient kernel by name: one kernel whatever the batch's shape

    def __init__(self, weights: LayerWeights, shape: ModelShape, device: torch.device) -> None:
        super().__init__(weights, shape, device)
        # F.scaled_dot_product_attention picks its backend by shape on CUDA, and a backend by the batch's shape
        # could round a row otherwise alone than in company; on a CPU (the tests) there is only its own.
        self.efficient = device.type == "cuda"

    @torch.jit.export
    def forward_batched(self, x: torch.Tensor, batch: LaneBatch) -> torch.Tensor:
        """x (N, hidden) through every layer, lane j's rows the j-th `batch.sizes` rows of x (decode steps only)."""
        for i in range(len(self.qkv)):
            h = self.norm(x, self.input_norm[i], False)
            qkv = self.linear(h, self.qkv[i], self.qkv_scales[i], self.qkv_bias[i])
            x = self.after_attention(i, x, self.attend_batched(i, qkv, batch), False)
        return x

    def attend_batched(self, i: int, qkv: torch.Tensor, batch: LaneBatch) -> torch.Tensor:
        """Layer i's attention (N, heads * dim) for every lane: the arithmetic of DecoderLayers.attend, batched."""
        n_rows, heads, kv_heads, dim = qkv.shape[0], self.heads, self.kv_heads, self.head_dim
        lanes, group, query_len = len(batch.sizes), heads // kv_heads, batch.query_len
        qk = qkv[:, : (heads + kv_heads) * dim].view(n_rows, heads + kv_heads, dim)
        qk = torch.addcmul(qk * batch.cos, qk.roll(dim // 2, -1), batch.sin)
        v = qkv[:, (heads + kv_heads) * dim :].view(n_rows, kv_heads, dim)
        new_keys, new_values = qk[:, heads:].split(batch.sizes), v.split(batch.sizes)
        for j in range(lanes):
            start, end = batch.starts[j], batch.starts[j] + batch.sizes[j]
            batch.keys[j][i][0, :, start:end] = new_keys[j].transpose(0, 1)
            batch.values[j][i][0, :, start:end] = new_values[j].transpose(0, 1)
        k = torch.cat([_first_keys(batch.keys[j][i], batch.key_len) for j in range(lanes)])  # (lanes, kv_heads, K, dim)
        v = torch.cat([_first_keys(batch.values[j][i], batch.key_len) for j in range(lanes)])
        # The q heads sharing a kv head stacked as rows of one query, as in DecoderLayers.attend.
        q = qk[:, :heads].index_select(0, batch.query_rows)  # (lanes * query_len, heads, dim)
        q = q.view(lanes, query_len, kv_heads, group, dim).permute(0, 2, 3, 1, 4)
        q = q.reshape(lanes, kv_heads, group * query_len, dim)
        mask = batch.masks[self.mask_kind[i]]
        if self.efficient:
            out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, mask, False, scale=self.scaling)[0]
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
        # (lanes, kv_heads, group * query_len, dim), maybe strided -> (N, heads * dim), the padded rows dropped
        out = out.reshape(lanes, kv_heads, group, query_len, dim).permute(0, 3, 1, 2, 4)
        return out.reshape(lanes * query_len, heads * dim).index_select(0, batch.real_rows)


def _first_keys(entries: torch.Tensor, key_len: int) -> torch.Tensor:
    """The first `key_len` positions of a cache's layer (1, kv_heads, L, dim), zeros past its end."""
    if entries.shape[2] >= key_len:
        return entries[:, :, :key_len]
    return F.pad(entries, [0, 0, 0, key_len - entries.shape[2]])


def decoder_class(weights: str, attention: str) -> type[DecoderLayers]:
    """The layers for a weight format and the attention they run: q4 products need the lane library, as the lane
    kernel does."""
    if weights == "q4":
        return Q4DecoderLayers
    return {"kernel": KernelDecoderLayers, "batched": BatchedDecoderLayers}.get(attention, DecoderLayers)


def scripted(layers: DecoderLayers, device: torch.device) -> torch.nn.Module:
    """`layers` under TorchScript, or as they are (eager Python, the same bits, slower) where it is gone.

    TorchScript is deprecated in favour of torch.compile, which was measured slower here (module docstring);
    its deprecation warning says nothing a user can act on, so it is not shown."""
    if device.type == "cuda":
        # Process-wide: on CUDA the graph executor fuses element-wise ops after a few profiling calls, which can
        # round otherwise than the calls before (greedy's early steps against LLMA's later ones); on a CPU it does not.
        torch._C._jit_set_texpr_fuser_enabled(False)
        torch._C._jit_override_can_fuse_on_gpu(False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated", category=DeprecationWarning)
        try:
            return torch.jit.script(layers)
        except Exception as error:  # a torch without TorchScript, or one that cannot compile these layers
            logger.warning("decoder layers run in eager Python (TorchScript failed: %s)", error)
            return layers
