"""A lean forward for Llama-architecture models: fused, prepacked weights and a preallocated KV cache.

For a 135M model on a CPU, transformers' forward spends more time in Python and in re-laying out weights
than in the products themselves (a one-token bf16 forward of SmolLM2: 26.3 ms there, 10.8 ms here, AMD EPYC
with 2 threads, docs/benchmark). This forward does the same arithmetic in a few calls per layer, in the
spirit of gpt-fast: q, k and v are one product, gate and up another, and on a CPU each weight is reordered
once for oneDNN (what inductor's freezing would do) instead of on every call. Its logits are not bit-identical to
transformers' (other kernels, other summation orders), only to its own: greedy and LLMA both run it, so
LLMA equals this engine's greedy. tests/decoding/test_packed.py checks it against transformers in fp32
and, bit for bit, against itself in every row of a W-wide block.

The layers run under TorchScript (DecoderLayers): the same aten calls, so the same bits, without Python
between them. torch.compile was measured on the same step and rejected: 38-44 s to compile and 48-56 ms a
step, twice the eager forward, with or without freezing (torch 2.13, AMD EPYC without AMX).
"""

import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from .hardware import onednn_has_bf16
from .kv_pool import FreeCaches
from .lane_kernel import lane_kernel_refusal
from .prefix_cache import PrefixCache
from .steps import StepConfig
from .weights import Weight, format_refusal, pack_weight, product, q4_product

logger = logging.getLogger(__name__)

PACKABLE_TYPES = ("llama", "mistral", "qwen2")  # pre-norm, SiLU-gated MLP, rotary attention: one code path
PACKED_DTYPES = (torch.float32, torch.bfloat16)
# Prompt chunks kept for reuse: the bundled model's keys and values take 23 KB a token in bf16, so 512 MB holds
# about 22,000 prompt tokens (every shipped help article's prompt some 30 times over).
DEFAULT_PREFIX_CACHE_BYTES = 512 * 2**20
# Where decode steps attend for every lane in one batched SDPA call when the lane kernel is not used
# (BatchedDecoderLayers); the tests add "cpu" to run that path here.
BATCHED_ATTENTION_DEVICES = ("cuda",)


@dataclass
class KvCache:
    """Keys and values of each layer, preallocated for `cache_len` positions: (1, kv_heads, cache_len, dim) each.

    Entries past what was accepted (a rejected draft, padding) stay until overwritten; the causal mask never
    lets a position see them, so rolling back is only moving where the next block is written.
    Once nothing refers to the KvCache its tensors go to the next reply of its length (decoding/kv_pool.py): keep the
    KvCache, not views of its tensors, for as long as they are read.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def cache_len(self) -> int:
        return self.keys[0].shape[2]


@dataclass(frozen=True)
class Lane:
    """One reply's rows in a forward: tokens `ids` (T,) at positions start.. over its own cache and key count."""

    ids: torch.Tensor
    start: int
    cache: KvCache
    key_len: int

    def check_fits(self) -> None:
        end = self.start + self.ids.shape[0]
        if end > self.cache.cache_len or self.key_len > self.cache.cache_len:
            raise ValueError(f"positions {self.start}..{end} do not fit a cache of {self.cache.cache_len}")


@dataclass(frozen=True)
class _LaneContext:
    """What a lane's attention needs in every layer, built once per forward: rotary rows and masks."""

    lane: Lane
    cos: torch.Tensor
    sin: torch.Tensor
    masks: list[torch.Tensor]  # one per attention kind of the model (PackedLlama.windows)


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
    mask_kind: list[int]  # which of a lane's masks the layer attends with (PackedLlama.windows)
    window: list[int]  # the layer's sliding window, -1 for none (the lane kernel's)

    def __init__(self, model: "PackedLlama", layers: Sequence[torch.nn.Module], mask_kind: list[int]) -> None:
        super().__init__()
        attn = [layer.self_attn for layer in layers]
        mlp = [layer.mlp for layer in layers]
        qkv = [model.pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])) for a in attn]
        o = [model.pack(a.o_proj.weight) for a in attn]
        gate_up = [model.pack(torch.cat([m.gate_proj.weight, m.up_proj.weight])) for m in mlp]
        down = [model.pack(m.down_proj.weight) for m in mlp]
        self.kernel = qkv[0].kernel
        self.qkv, self.qkv_scales = [w.data for w in qkv], [w.scales for w in qkv]
        self.qkv_bias = [_qkv_bias(a) for a in attn]
        self.o, self.o_scales = [w.data for w in o], [w.scales for w in o]
        self.o_bias = [_detached(a.o_proj.bias) for a in attn]
        self.gate_up, self.gate_up_scales = [w.data for w in gate_up], [w.scales for w in gate_up]
        self.down, self.down_scales = [w.data for w in down], [w.scales for w in down]
        self.input_norm = [layer.input_layernorm.weight.detach() for layer in layers]
        self.post_norm = [layer.post_attention_layernorm.weight.detach() for layer in layers]
        self.mask_kind = mask_kind
        self.window = [-1 if model.windows[kind] is None else model.windows[kind] for kind in mask_kind]
        self.heads, self.kv_heads, self.head_dim = model.n_heads, model.n_kv_heads, model.head_dim
        self.intermediate, self.eps, self.scaling = model.intermediate, model.eps, model.scaling

    def forward(
        self, x: torch.Tensor, sizes: list[int], starts: list[int], key_lens: list[int],
        keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]],
        cos: list[torch.Tensor], sin: list[torch.Tensor], masks: list[list[torch.Tensor]], copy_keys: bool,
        cos_table: torch.Tensor, sin_table: torch.Tensor, prompt: bool,
    ) -> torch.Tensor:
        """x (sum of sizes, hidden) through every layer; lane j's rows are the j-th `sizes` rows of x.
        `copy_keys`: attention reads a contiguous copy of the keys, not a view whose stride is the cache's size.
        `prompt`: SDPA and F.rms_norm (a prefill, or a packing without the lane kernel), which read the lanes' own
        rotary rows and masks; else the lane kernel, which reads the whole rotary tables."""
        for i in range(len(self.qkv)):
            h = self.norm(x, self.input_norm[i], prompt)
            qkv = self.linear(h, self.qkv[i], self.qkv_scales[i], self.qkv_bias[i])
            rows = self.attend_lanes(
                i, qkv, sizes, starts, key_lens, keys, values, cos, sin, masks, copy_keys, cos_table, sin_table, prompt
            )
            x = self.after_attention(i, x, rows, prompt)
        return x

    def after_attention(self, i: int, x: torch.Tensor, rows: torch.Tensor, prompt: bool) -> torch.Tensor:
        """Layer i's output projection and MLP over x (N, hidden), given its attention rows (N, heads * dim)."""
        x = x + self.linear(rows, self.o[i], self.o_scales[i], self.o_bias[i])
        h = self.norm(x, self.post_norm[i], prompt)
        gate_up = self.linear(h, self.gate_up[i], self.gate_up_scales[i], None)
        gated = F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]
        return x + self.linear(gated, self.down[i], self.down_scales[i], None)

    def linear(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
        return product(self.kernel, x, data, scales, bias)

    def norm(self, x: torch.Tensor, weight: torch.Tensor, prompt: bool) -> torch.Tensor:
        return F.rms_norm(x, [x.shape[-1]], weight, self.eps)

    def attend_lanes(
        self, i: int, qkv: torch.Tensor, sizes: list[int], starts: list[int], key_lens: list[int],
        keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], cos: list[torch.Tensor],
        sin: list[torch.Tensor], masks: list[list[torch.Tensor]], copy_keys: bool,
        cos_table: torch.Tensor, sin_table: torch.Tensor, prompt: bool,
    ) -> torch.Tensor:
        """Layer i's attention output (sum of sizes, heads * dim) for every lane: here an SDPA call per lane."""
        return self.attend_each(i, qkv, sizes, starts, key_lens, keys, values, cos, sin, masks, copy_keys)

    def attend_each(
        self, i: int, qkv: torch.Tensor, sizes: list[int], starts: list[int], key_lens: list[int],
        keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], cos: list[torch.Tensor],
        sin: list[torch.Tensor], masks: list[list[torch.Tensor]], copy_keys: bool,
    ) -> torch.Tensor:
        parts = qkv.split(sizes)
        attended = [
            self.attend(parts[j], starts[j], key_lens[j], keys[j][i], values[j][i], cos[j], sin[j],
                        masks[j][self.mask_kind[i]], copy_keys)
            for j in range(len(sizes))
        ]
        return attended[0] if len(attended) == 1 else torch.cat(attended)

    def attend(
        self, qkv: torch.Tensor, start: int, key_len: int, keys: torch.Tensor, values: torch.Tensor,
        cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, copy_keys: bool,
    ) -> torch.Tensor:
        """One lane's attention (T, heads * dim) from its rows of the q/k/v product, over its own cache."""
        n_tokens, heads, kv_heads, dim = qkv.shape[0], self.heads, self.kv_heads, self.head_dim
        # q and k take the same rotation, so they are rotated together: (T, heads + kv_heads, dim), and
        # rotate_half(x) * sin is roll(x, half) * signed sin (PackedLlama._rotary_tables).
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
            # (0 of 600). Its mask has the row twice (PackedLlama._lane_context).
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
    """DecoderLayers whose decode steps attend through the lane kernel: one call per layer for every lane
    (decoding/csrc/lane_attention.cpp), each row's bits its own whatever its company, and normalize each row in
    one pass; prefills too, unless the packing prefills through SDPA (PackedLlama.prefill_attention: replies made
    before prompts moved to the kernel), which then keep SDPA and F.rms_norm."""

    def norm(self, x: torch.Tensor, weight: torch.Tensor, prompt: bool) -> torch.Tensor:
        if prompt:
            return F.rms_norm(x, [x.shape[-1]], weight, self.eps)
        return torch.ops.llma.rms_norm(x, weight, self.eps)

    def attend_lanes(
        self, i: int, qkv: torch.Tensor, sizes: list[int], starts: list[int], key_lens: list[int],
        keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], cos: list[torch.Tensor],
        sin: list[torch.Tensor], masks: list[list[torch.Tensor]], copy_keys: bool,
        cos_table: torch.Tensor, sin_table: torch.Tensor, prompt: bool,
    ) -> torch.Tensor:
        if prompt:
            return self.attend_each(i, qkv, sizes, starts, key_lens, keys, values, cos, sin, masks, copy_keys)
        return torch.ops.llma.lane_attention(
            qkv, cos_table, sin_table, [keys[j][i] for j in range(len(sizes))],
            [values[j][i] for j in range(len(sizes))], sizes, starts, self.heads, self.kv_heads, self.window[i],
            self.scaling,
        )


class Q4DecoderLayers(KernelDecoderLayers):
    """KernelDecoderLayers whose products run the lane library's q4 kernel (decoding/csrc/q4_product.cpp): a
    separate class, because TorchScript compiles every call it sees, and the op exists only where it was built."""

    def linear(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
        return q4_product(x, data, scales, bias)


class LaneBatch(NamedTuple):
    """Every lane of a shared forward laid out as one attention batch, built once per forward
    (PackedLlama._lane_batch): lane j's rows padded to `query_len`, its keys to `key_len`, the padding masked."""

    sizes: list[int]  # each lane's rows, stacked in this order (N in all)
    starts: list[int]  # each lane's first position
    query_len: int  # the most rows of any lane, at least 2 (a lone row is asked twice, as DecoderLayers.attend)
    key_len: int  # the most keys of any lane, rounded up to 16 (the CUDA kernel's mask alignment)
    cos: torch.Tensor  # (N, 1, dim) each stacked row's rotary, as _rotary_tables
    sin: torch.Tensor
    masks: list[torch.Tensor]  # per attention kind: (lanes, kv_heads, group * query_len, key_len), 0 or -inf
    query_rows: torch.Tensor  # (lanes * query_len,) the stacked row each padded row asks (a lane's last past its end)
    real_rows: torch.Tensor  # (N,) the padded row that holds each stacked row


class BatchedDecoderLayers(DecoderLayers):
    """DecoderLayers whose decode steps attend for every lane in one SDPA call per layer (`forward_batched`), where
    the lane kernel does not run (CUDA): the per-lane path costs some ten kernel launches per lane and layer, and
    on a GPU a shared forward of 8 replies was bound by them (1.33x the throughput of one reply after another on an
    H200, docs/gpu/2026-12-04-nvidia-h200). A reply alone runs the same path, a batch of one with the same padding
    rule, so its rows meet the same kernel with the same per-row arithmetic alone and in company: padded queries
    are rows of their own, padded keys are masked (exp(-inf) adds an exact zero), which the start-up probe checks
    (decoding/batch_probe.py). Only the cache writes stay per lane: each reply's cache is a tensor of its own."""

    efficient: bool  # call CUDA's memory-efficient kernel by name: one kernel whatever the batch's shape

    def __init__(self, model: "PackedLlama", layers: Sequence[torch.nn.Module], mask_kind: list[int]) -> None:
        super().__init__(model, layers, mask_kind)
        # F.scaled_dot_product_attention picks its backend by shape on CUDA, and a backend by the batch's shape
        # could round a row otherwise alone than in company; on a CPU (the tests) there is only its own.
        self.efficient = model.device.type == "cuda"

    @torch.jit.export
    def forward_batched(
        self, x: torch.Tensor, batch: LaneBatch, keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]],
    ) -> torch.Tensor:
        """x (N, hidden) through every layer, lane j's rows the j-th `batch.sizes` rows of x (decode steps only)."""
        for i in range(len(self.qkv)):
            h = self.norm(x, self.input_norm[i], False)
            qkv = self.linear(h, self.qkv[i], self.qkv_scales[i], self.qkv_bias[i])
            x = self.after_attention(i, x, self.attend_batched(i, qkv, batch, keys, values), False)
        return x

    def attend_batched(
        self, i: int, qkv: torch.Tensor, batch: LaneBatch, keys: list[list[torch.Tensor]],
        values: list[list[torch.Tensor]],
    ) -> torch.Tensor:
        """Layer i's attention (N, heads * dim) for every lane: the arithmetic of DecoderLayers.attend, batched."""
        n_rows, heads, kv_heads, dim = qkv.shape[0], self.heads, self.kv_heads, self.head_dim
        lanes, group, query_len = len(batch.sizes), heads // kv_heads, batch.query_len
        qk = qkv[:, : (heads + kv_heads) * dim].view(n_rows, heads + kv_heads, dim)
        qk = torch.addcmul(qk * batch.cos, qk.roll(dim // 2, -1), batch.sin)
        v = qkv[:, (heads + kv_heads) * dim :].view(n_rows, kv_heads, dim)
        new_keys, new_values = qk[:, heads:].split(batch.sizes), v.split(batch.sizes)
        for j in range(lanes):
            start, end = batch.starts[j], batch.starts[j] + batch.sizes[j]
            keys[j][i][0, :, start:end] = new_keys[j].transpose(0, 1)
            values[j][i][0, :, start:end] = new_values[j].transpose(0, 1)
        k = torch.cat([_first_keys(keys[j][i], batch.key_len) for j in range(lanes)])  # (lanes, kv_heads, K, dim)
        v = torch.cat([_first_keys(values[j][i], batch.key_len) for j in range(lanes)])
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


def decoder_class(weights: str, lane_kernel: bool, batched_attention: bool = False) -> type[DecoderLayers]:
    """The scripted layers for a packing: q4 products need the lane library, as the lane kernel does."""
    if weights == "q4":
        return Q4DecoderLayers
    if lane_kernel:
        return KernelDecoderLayers
    return BatchedDecoderLayers if batched_attention else DecoderLayers


def packing_refusal(model: torch.nn.Module) -> str | None:
    """Why `model` cannot run on the packed forward, or None when it can."""
    cfg = model.config
    if cfg.model_type not in PACKABLE_TYPES:
        return f"{cfg.model_type} is not one of the packed architectures ({', '.join(PACKABLE_TYPES)})"
    if model.dtype not in PACKED_DTYPES:
        return f"{model.dtype} weights (packed: float32 or bfloat16)"
    if model.device.type not in ("cpu", "cuda"):
        return f"device {model.device.type}"
    if model.device.type == "cpu" and not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "mlp_bias", False):
        return "an MLP other than bias-free SiLU-gated"
    layer = model.model.layers[0]
    if not hasattr(layer.self_attn, "q_proj") or not hasattr(layer.mlp, "gate_proj"):
        return "fused or unusual projection layout"
    return None


class PackedLlama:
    """The model's weights, packed for fixed-width decode steps; runs forwards over a `KvCache`.

    Stands in for the model wherever the decode loops take one (`config`, `device`, `dtype` are the model's);
    `source` is the transformers model it was packed from.
    """

    def __init__(
        self, model: torch.nn.Module, width_hint: int = 8, weights: str = "dense", prefill_weights: str | None = None,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, lane_kernel: bool | None = None,
        prefill_attention: str | None = None, batched_attention: bool | None = None,
    ) -> None:
        refusal = packing_refusal(model) or format_refusal(weights, model.dtype, model.device)
        if refusal is not None:
            raise ValueError(f"cannot pack this model: {refusal}")
        # Decode steps attend through the lane kernel on a CPU where it builds (None: then), else through SDPA.
        # The two round differently, so it is one choice per packing, recorded with every reply
        # (ReplyStats.attention) and reproduced by Verify.
        if lane_kernel is None:
            lane_kernel = model.device.type == "cpu" and lane_kernel_refusal() is None
        elif lane_kernel and (model.device.type != "cpu" or lane_kernel_refusal() is not None):
            raise ValueError(f"no lane kernel here: {lane_kernel_refusal() or 'it runs on a CPU only'}")
        if weights == "q4" and not lane_kernel:  # one library: its products come with its attention
            raise ValueError("q4 weights decode through the lane kernel; there is no SDPA packing of them")
        self.lane_kernel = lane_kernel
        # Without the lane kernel, decode steps attend for all lanes in one SDPA call per layer on CUDA (None: on
        # BATCHED_ATTENTION_DEVICES), else lane by lane (BatchedDecoderLayers). The two round differently: one
        # choice per packing, recorded with every reply as its attention ("batched" or "sdpa").
        if batched_attention is None:
            batched_attention = model.device.type in BATCHED_ATTENTION_DEVICES and not lane_kernel
        if batched_attention and lane_kernel:
            raise ValueError("decode steps attend through the lane kernel or batched SDPA, not both")
        self.batched_attention = batched_attention
        # Prompts attend through the lane kernel too where steps do (None: then), with its RMS norm: a 254-token
        # prompt tail after 448 cached tokens took 306 against 355 ms through SDPA (mean of 8 alternating runs,
        # AMD EPYC, 2 threads), which spent as long in masks, key copies and small elementwise calls as in
        # attention. Its bits differ from SDPA's, so it is recorded with every reply (ReplyStats.prefill_attention)
        # and Verify prefills a reply made before it through SDPA again.
        self.prefill_attention = prefill_attention or ("kernel" if lane_kernel else "sdpa")
        if self.prefill_attention not in ("kernel", "sdpa"):
            raise ValueError(f"prefill attention is kernel or sdpa, not {self.prefill_attention!r}")
        if self.prefill_attention == "kernel" and not lane_kernel:
            raise ValueError("prefills attend through the lane kernel only where decode steps do")
        self.source = model
        self.weights = weights  # "dense", "int8", "int4" or "q4" (decoding/weights.py)
        # Prefills run dense whatever the steps' format: the int kernels are made for a few rows, and a prompt of
        # hundreds cost them twice what it costs dense (512 tokens, AMD EPYC: int4 0.88 s, int8 1.03 s, dense
        # 0.45 s). Greedy and LLMA share the prefill, so replies stay identical; "as the steps" is kept for Verify
        # of replies made before (ReplyStats.prefill_weights).
        self.prefill_weights = prefill_weights or "dense"
        self.config, self.device, self.dtype = model.config, model.device, model.dtype
        # oneDNN's prepacked products, where it has kernels for the dtype: on a CPU without AVX-512 its bf16 path
        # refuses, and bf16 products run through ATen's own (slower than fp32 there; pick_dtype picks fp32).
        self._onednn = model.device.type == "cpu" and (model.dtype != torch.bfloat16 or onednn_has_bf16())
        self._width_hint = width_hint
        cfg, inner = model.config, model.model
        attn = inner.layers[0].self_attn
        self.n_heads, self.n_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.eps = cfg.rms_norm_eps
        self.intermediate = inner.layers[0].mlp.gate_proj.weight.shape[0]
        self.n_layers = len(inner.layers)
        layer_windows = [_window(cfg, i) for i in range(self.n_layers)]
        self.windows = list(dict.fromkeys(layer_windows))  # the attention kinds: sliding windows, None for full
        mask_kind = [self.windows.index(window) for window in layer_windows]
        layers = decoder_class(weights, lane_kernel, batched_attention)(self, inner.layers, mask_kind)
        self.decoder = _scripted(layers, model.device)
        self.embed = inner.embed_tokens.weight.detach()
        self.norm = inner.norm.weight.detach()
        self._rotary = inner.rotary_emb
        self._cos = self._sin = torch.empty(0)
        self._prefiller = (
            self if self.prefill_weights == weights
            # keeps no chunks itself, and only prefills (SDPA)
            else PackedLlama(model, width_hint, self.prefill_weights, prefix_cache_bytes=0,
                             lane_kernel=self.prefill_weights == "q4" or self.prefill_attention == "kernel",
                             prefill_attention=self.prefill_attention)
        )
        # Under int4 and q4 the head stays in the model's dtype (the bundled GGUF stores it, the tied embedding,
        # as Q8_0, which bf16 holds nearly as is): the int8 kernel's cost grows with every row and the dense
        # one's barely (16 rows: 12.2 against 3.4 ms; 1 row: 2.05 against 2.19 ms; AMD EPYC, 2 threads), and a
        # shared forward of many replies' rows pays it in full. It is the dense prefiller's head, held once.
        if weights in ("int4", "q4"):
            self.head = self._prefiller.head if self._prefiller.weights == "dense" else self.pack_head(model, "dense")
        else:
            self.head = self.pack_head(model, weights)
        self.prefixes = PrefixCache(prefix_cache_bytes)  # chunks of this packing's prefills (its prefiller's bits)
        self._free_caches = FreeCaches()

    def parameters(self):
        return self.source.parameters()

    @property
    def kv_bytes_per_token(self) -> int:
        """What one position's keys and values take in a cache (23 KB for the bundled model in bf16)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.embed.element_size()

    def prefill(self, ids: torch.Tensor, start: int, cache: KvCache, key_len: int, chunked: bool) -> torch.Tensor:
        """Logits (1, V) of the last of prompt tokens `ids` at positions start.., their keys and values written
        into `cache`, by the `prefill_weights` packing (the same cache layout in every format). `chunked`: one
        chunk of a chunked prefill, attending over a copy of the keys (StepConfig.prefill_chunk)."""
        lane = Lane(ids, start, cache, key_len)
        prompt = self.prefill_attention == "sdpa"  # else the decode steps' path: the lane kernel, with dense products
        return self._prefiller.forward_lanes([lane], last_only=True, copy_keys=chunked, prompt=prompt)[0]

    def new_cache(self, cache_len: int) -> KvCache:
        """A zeroed cache: a finished reply's where one of this length waits (decoding/kv_pool.py), else new.
        Zeros, not empty: masked keys still enter the products, and 0 x NaN would poison a row."""
        kept = self._free_caches.take(cache_len)
        if kept is None:
            shape = (1, self.n_kv_heads, cache_len, self.head_dim)  # SDPA's fast CPU kernel wants 4-d inputs
            def zeros() -> list[torch.Tensor]:
                return [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.n_layers)]
            with torch.inference_mode():  # every cache alike, new or kept: written under inference mode only
                kept = zeros(), zeros()
        cache = KvCache(*kept)
        self._free_caches.watch(cache, cache_len, *kept)
        return cache

    def forward(
        self, ids: torch.Tensor, start: int, cache: KvCache, key_len: int, last_only: bool = False
    ) -> torch.Tensor:
        """Logits (T, V) of tokens `ids` (T,) at positions start.., writing their keys and values into `cache`.

        Every row attends over the first `key_len` keys, those past its own position masked. A row's sums
        change, in the last bits, with the number of keys (measured: SDPA on this CPU), so the caller keeps
        `key_len` a function of the row's position alone (StepConfig.key_len).
        """
        return self.forward_lanes([Lane(ids, start, cache, key_len)], last_only)[0]

    @torch.inference_mode()
    def forward_lanes(
        self, lanes: Sequence["Lane"], last_only: bool = False, copy_keys: bool = False, prompt: bool = False
    ) -> list[torch.Tensor]:
        """Logits of each lane's rows (T_i, V), or of its last row (1, V) with `last_only`.

        The layer products (q/k/v, o, gate/up, down, the head) run once over all lanes' rows stacked;
        attention runs per lane over its own cache with exactly the keys it would attend alone, or for every lane
        in one call, the padding masked (BatchedDecoderLayers: decode steps on CUDA). A forward
        of one lane is the single-reply forward, so a reply decoded alone and in company run the same code;
        that a row's products do not change with the stacked row count is measured (decoding/batch_probe.py).
        """
        for lane in lanes:
            lane.check_fits()
        sizes = [lane.ids.shape[0] for lane in lanes]
        by_kernel = self.lane_kernel and not prompt
        if by_kernel:  # the kernel takes positions and the whole rotary tables, no masks
            self._rotary_tables(0, 1, max(lane.cache.cache_len for lane in lanes))
        x = F.embedding(torch.cat([lane.ids for lane in lanes]) if len(lanes) > 1 else lanes[0].ids, self.embed)
        keys, values = [lane.cache.keys for lane in lanes], [lane.cache.values for lane in lanes]
        if self.batched_attention and not prompt:
            x = self.decoder.forward_batched(x, self._lane_batch(lanes), keys, values)  # (sum T_i, hidden)
        else:
            contexts = [] if by_kernel else [self._lane_context(lane) for lane in lanes]
            x = self.decoder(
                x, sizes, [lane.start for lane in lanes], [lane.key_len for lane in lanes], keys, values,
                [ctx.cos for ctx in contexts], [ctx.sin for ctx in contexts], [ctx.masks for ctx in contexts],
                copy_keys, self._cos, self._sin, not by_kernel,
            )  # (sum T_i, hidden)
        if last_only:
            x, sizes = x[torch.tensor(sizes).cumsum(0) - 1], [1] * len(lanes)
        if by_kernel:
            normed = torch.ops.llma.rms_norm(x.contiguous(), self.norm, self.eps)
        else:
            normed = F.rms_norm(x, x.shape[-1:], self.norm, self.eps)
        logits = self.head(normed)
        return list(logits.split(sizes))

    # --- one layer --------------------------------------------------------------------------------

    def _lane_context(self, lane: "Lane") -> "_LaneContext":
        n_tokens = lane.ids.shape[0]
        cos, sin = self._rotary_tables(lane.start, n_tokens, lane.cache.cache_len)
        group = self.n_heads // self.n_kv_heads
        masks = [self._mask(lane.start, n_tokens, lane.key_len, w) for w in self.windows]
        if n_tokens == 1:  # a lone row's query is asked twice (DecoderLayers.attend)
            masks = [mask.expand(2, -1) for mask in masks]
        masks = [mask.repeat(group, 1) for mask in masks]
        return _LaneContext(lane, cos, sin, masks)

    def _lane_batch(self, lanes: Sequence["Lane"]) -> LaneBatch:
        """The lanes as one attention batch (LaneBatch): its indices made on the host and sent in one copy."""
        sizes, starts = [lane.ids.shape[0] for lane in lanes], [lane.start for lane in lanes]
        query_len = max(2, *sizes)
        key_len = -(-max(lane.key_len for lane in lanes) // 16) * 16
        self._rotary_tables(0, 1, max(lane.cache.cache_len for lane in lanes))
        first_rows = [sum(sizes[:j]) for j in range(len(lanes))]
        padded = [(j, min(t, size - 1)) for j, size in enumerate(sizes) for t in range(query_len)]
        query_rows = [first_rows[j] + t for j, t in padded]
        positions = [starts[j] + t for j, t in padded]  # (lanes * query_len,) a padded row repeats its lane's last
        real_rows = [j * query_len + t for j, size in enumerate(sizes) for t in range(size)]
        index = torch.tensor(query_rows + positions + real_rows, device=self.device)
        query_rows_t, positions_t, real_rows_t = index.split([len(query_rows), len(positions), len(real_rows)])
        row_positions = positions_t.index_select(0, real_rows_t)  # (N,)
        masks = [self._batch_mask(positions_t.view(len(lanes), query_len), key_len, w) for w in self.windows]
        return LaneBatch(sizes, starts, query_len, key_len, self._cos[row_positions, None],
                         self._sin[row_positions, None], masks, query_rows_t, real_rows_t)

    def _batch_mask(self, positions: torch.Tensor, key_len: int, window: int | None) -> torch.Tensor:
        """(lanes, kv_heads, group * query_len, key_len) to add to the scores, as _mask for each lane's padded rows
        `positions` (lanes, query_len), repeated for the q heads of a kv head and broadcast over the kv heads."""
        lanes, query_len = positions.shape
        keys = torch.arange(key_len, device=self.device)
        hidden = keys > positions[:, :, None]  # (lanes, query_len, key_len)
        if window is not None:
            hidden |= keys <= positions[:, :, None] - window
        mask = torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill_(hidden, float("-inf"))
        group = self.n_heads // self.n_kv_heads
        mask = mask[:, None].expand(lanes, group, query_len, key_len).reshape(lanes, 1, group * query_len, key_len)
        return mask.expand(lanes, self.n_kv_heads, group * query_len, key_len)  # the CUDA kernel wants every head

    def _mask(self, start: int, n_tokens: int, key_len: int, window: int | None) -> torch.Tensor:
        """(T, key_len) to add to the scores: 0 where row t sees the key (positions <= start + t, within the
        window), -inf elsewhere. SDPA turns a boolean mask into this on every call (same bits, measured)."""
        keys = torch.arange(key_len, device=self.device)
        positions = torch.arange(start, start + n_tokens, device=self.device)[:, None]
        hidden = keys > positions
        if window is not None:
            hidden |= keys <= positions - window
        return torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill_(hidden, float("-inf"))

    def _rotary_tables(self, start: int, n_tokens: int, cache_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, 1, dim) for the positions, from the model's own rotary module (any rope type)."""
        if self._cos.shape[0] < cache_len:
            positions = torch.arange(cache_len, device=self.device)[None]
            probe = torch.zeros(1, dtype=self.dtype, device=self.device)
            cos, sin = self._rotary(probe, positions)  # (1, L, dim) in the model's dtype
            half = self.head_dim // 2
            # rotate_half(x) * sin == roll(x, half) * [-sin_first_half, sin_second_half]
            self._cos, self._sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        end = start + n_tokens
        return self._cos[start:end, None], self._sin[start:end, None]

    # --- packing ----------------------------------------------------------------------------------

    def pack_head(self, model: torch.nn.Module, weights: str) -> Weight:
        return pack_weight(model.lm_head.weight, weights, self._onednn, self._width_hint)

    def pack(self, weight: torch.Tensor) -> Weight:
        """`weight` held in this forward's format, laid out for its kernel."""
        return pack_weight(weight, self.weights, self._onednn, self._width_hint)


def _scripted(layers: DecoderLayers, device: torch.device) -> torch.nn.Module:
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


def _qkv_bias(attn: torch.nn.Module) -> torch.Tensor | None:
    biases = [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
    return torch.cat(biases).detach() if all(b is not None for b in biases) else None


def _detached(bias: torch.Tensor | None) -> torch.Tensor | None:
    return bias.detach() if bias is not None else None


def _window(config, layer_index: int) -> int | None:
    """The layer's sliding window, or None for full attention."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return window if layer_types[layer_index] == "sliding_attention" else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return window


def forward_name(model) -> str:
    """Which forward decodes with `model`: "packed" or "transformers" (for the engine line, stats and keys)."""
    return "packed" if isinstance(model, PackedLlama) else "transformers"


def weights_name(model) -> str:
    """How the forward holds its weights: "int8", "int4" or "q4" (packed only), else "dense" (the model's dtype)."""
    return model.weights if isinstance(model, PackedLlama) else "dense"


def attention_name(model) -> str:
    """How decode steps attend: "kernel" (the lane kernel, decoding/csrc), "batched" (one SDPA call for every lane,
    CUDA) or "sdpa" (lane by lane: every reply before them)."""
    if isinstance(model, PackedLlama) and model.lane_kernel:
        return "kernel"
    return "batched" if isinstance(model, PackedLlama) and model.batched_attention else "sdpa"


def pack_model(
    model: torch.nn.Module, width_hint: int = 8, weights: str = "dense",
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> "PackedLlama | torch.nn.Module":
    """The packed forward where the model allows it, else the model itself (transformers' forward)."""
    if packing_refusal(model) is not None:
        return model
    return PackedLlama(model, width_hint, weights, prefix_cache_bytes=prefix_cache_bytes)


class PackedRunner:
    """Decode forwards of a `PackedLlama` for one prompt: the prefill, then steps `steps.width` wide."""

    def __init__(self, model: PackedLlama, steps: StepConfig) -> None:
        if steps.width is None:
            raise ValueError("the packed forward runs fixed-width steps only")
        self.model, self.steps = model, steps
        self.cache = model.new_cache(steps.cache_len)
        self.length = 0  # positions held: the prompt, then each block's real inputs (padding is overwritten)
        self.reused = 0  # prompt tokens whose keys and values came from the prefix cache

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor:
        """Logits (V,) of the prompt's last token, its keys and values in the cache."""
        *_, logits = self.prefill_steps(prompt_ids)
        return logits

    def prefill_steps(self, prompt_ids: Sequence[int], counted: bool = True) -> Iterator[torch.Tensor | None]:
        """The prefill a forward at a time: None after each chunk but the last, then the last token's logits (V,).

        Full chunks before the last one, and the shared beginning's last chunk (StepConfig.prefill_break), are
        taken from the model's prefix cache where an earlier prompt began with the same tokens
        (decoding/prefix_cache.py), and kept there once computed. The prefill is shared by
        greedy and LLMA alike, so any key count does; each forward's granule end is cheapest. `counted`: in the
        cache's reuse counts (a warm-up's prefill is not a prompt's)."""
        chunked, prefixes = self.steps.prefill_chunk is not None, self.model.prefixes
        kept = chunked and prefixes.max_bytes > 0  # else no digest, lookup or copy: nothing would be kept
        key = PrefixCache.first_key(self.steps.prefill_chunk or 0)
        reused = 0
        for start, end in self.steps.prefill_chunks(len(prompt_ids)):
            full = kept and self.steps.kept_chunk(start, end)
            if full:
                key = PrefixCache.next_key(key, prompt_ids[start:end])
            if full and end < len(prompt_ids) and (kv := prefixes.get(key)) is not None:
                self._write(kv, start, end)
                reused += end - start
                continue
            ids = self._ids(prompt_ids[start:end])
            logits = self.model.prefill(ids, start, self.cache, self.steps.key_len(end - 1), chunked)
            if full:
                prefixes.put(key, self._read(start, end))
            if end < len(prompt_ids):
                yield None
        if chunked and counted:
            prefixes.count(reused, len(prompt_ids) - reused)
        self.reused = reused
        self.length = len(prompt_ids)
        yield logits[-1]

    @torch.inference_mode()  # on the scheduler's thread too, over a cache made in inference mode
    def _read(self, start: int, end: int) -> torch.Tensor:
        """Keys and values of positions start..end, (2, layers, kv_heads, end - start, dim), a copy."""
        return torch.stack([
            torch.stack([layer[0, :, start:end] for layer in self.cache.keys]),
            torch.stack([layer[0, :, start:end] for layer in self.cache.values]),
        ])

    @torch.inference_mode()  # on the scheduler's thread too, over a cache made in inference mode
    def _write(self, kv: torch.Tensor, start: int, end: int) -> None:
        for layer, keys in enumerate(self.cache.keys):
            keys[0, :, start:end] = kv[0, layer]
        for layer, values in enumerate(self.cache.values):
            values[0, :, start:end] = kv[1, layer]

    def step(self, block: list[int]) -> torch.Tensor:
        """Logits (len(block), V) of one forward of `block` padded to the step width; every row through the head.

        A next block follows on after the real inputs, writing over the padding's entries."""
        logits = self.model.forward_lanes([self.lane(block)])[0]
        self.advance(len(block))
        return logits[: len(block)]

    def lane(self, block: list[int]) -> Lane:
        """`block`, padded to the step width, as this reply's rows of a forward (alone or shared)."""
        if len(block) > self.steps.block_len(self.length):
            raise ValueError(f"a block of {len(block)} at position {self.length} crosses a key granule")
        return Lane(self._ids(self.steps.pad(block)), self.length, self.cache, self.steps.key_len(self.length))

    def advance(self, n_inputs: int) -> None:
        """The block's real inputs are held now; the padding's entries get overwritten by the next block."""
        self.length += n_inputs

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def _ids(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(ids), device=self.model.device)
