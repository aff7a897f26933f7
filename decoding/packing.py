"""Packing a transformers model for the packed forward: whether it can be, how the packing attends, and every layer's
weights laid out once for their kernels (decoding/weights.py), as plain tensors the scripted layers read.

Llama, Mistral and Qwen2 share one code path: pre-norm, a SiLU-gated MLP, rotary attention. q, k and v become one
product and gate and up another, in the spirit of gpt-fast; on a CPU each weight is reordered once for oneDNN (what
inductor's freezing would do) instead of on every call.
"""

from dataclasses import dataclass

import torch

from .hardware import onednn_has_bf16
from .lane_kernel import lane_kernel_refusal
from .recipe import Packing
from .weights import Weight, format_refusal, lane_head_refusal, lane_head_weight, pack_weight

PACKABLE_TYPES = ("llama", "mistral", "qwen2")  # pre-norm, SiLU-gated MLP, rotary attention: one code path
PACKED_DTYPES = (torch.float32, torch.bfloat16)
# Where decode steps attend for every lane in one batched SDPA call when the lane kernel is not used
# (BatchedDecoderLayers); the tests add "cpu" to run that path here.
BATCHED_ATTENTION_DEVICES = ("cuda",)


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


def settle_packing(
    model: torch.nn.Module, weights: str = "dense", prefill_weights: str | None = None,
    lane_kernel: bool | None = None, prefill_attention: str | None = None, batched_attention: bool | None = None,
    lane_head: bool | None = None,
) -> Packing:
    """The packing of `model` for these choices, each one left None as this machine allows; a combination that
    cannot run is refused with the reason (ValueError). Every choice rounds a reply otherwise, so each is recorded
    with every reply (ReplyStats) and reproduced by Verify."""
    refusal = packing_refusal(model) or format_refusal(weights, model.dtype, model.device)
    refusal = refusal or (format_refusal(prefill_weights, model.dtype, model.device) if prefill_weights else None)
    if refusal is not None:
        raise ValueError(f"cannot pack this model: {refusal}")
    # Decode steps attend through the lane kernel on a CPU where it builds, else through SDPA.
    kernel_here = model.device.type == "cpu" and lane_kernel_refusal() is None
    lane_kernel = kernel_here if lane_kernel is None else lane_kernel
    if (lane_kernel or prefill_weights == "q4") and not kernel_here:
        raise ValueError(f"no lane kernel here: {lane_kernel_refusal() or 'it runs on a CPU only'}")
    if weights == "q4" and not lane_kernel:  # one library: its products come with its attention
        raise ValueError("q4 weights decode through the lane kernel; there is no SDPA packing of them")
    # Without the lane kernel, decode steps attend for all lanes in one SDPA call per layer on CUDA (None: on
    # BATCHED_ATTENTION_DEVICES), else lane by lane (BatchedDecoderLayers).
    if batched_attention is None:
        batched_attention = model.device.type in BATCHED_ATTENTION_DEVICES and not lane_kernel
    if batched_attention and lane_kernel:
        raise ValueError("decode steps attend through the lane kernel or batched SDPA, not both")
    # Prompts attend through the lane kernel too where steps do, with its RMS norm: a 254-token prompt tail after 448
    # cached tokens took 306 against 355 ms through SDPA (mean of 8 alternating runs, AMD EPYC, 2 threads), which
    # spent as long in masks, key copies and small elementwise calls as in attention. Replies made before that
    # prefilled through SDPA, and Verify prefills them so again.
    prefill_attention = prefill_attention or ("kernel" if lane_kernel else "sdpa")
    if prefill_attention not in ("kernel", "sdpa"):
        raise ValueError(f"prefill attention is kernel or sdpa, not {prefill_attention!r}")
    if prefill_attention == "kernel" and not lane_kernel:
        raise ValueError("prefills attend through the lane kernel only where decode steps do")
    attention = "kernel" if lane_kernel else "batched" if batched_attention else "sdpa"
    # The head runs on the lane library where bf16 is emulated and the library can hold it (a vocabulary in 16s).
    head_refusal = lane_head_refusal(model.lm_head.weight) if lane_kernel or lane_head else None
    if lane_head is None:
        lane_head = lane_kernel and bf16_emulated(weights, model.dtype) and head_refusal is None
    elif lane_head and head_refusal is not None:
        raise ValueError(f"cannot pack this model: {head_refusal}")
    return Packing("packed", weights, prefill_weights or prompt_weights(weights, model.dtype), attention,
                   prefill_attention, lane_head)


def bf16_emulated(weights: str, dtype: torch.dtype) -> bool:
    """Whether q4 steps in bf16 run where PyTorch's bf16 products are emulated (an AVX2 CPU without AVX512-BF16):
    there prompts prefill in q4 (prompt_weights) and the head runs on the lane library (Packer.head)."""
    return weights == "q4" and dtype == torch.bfloat16 and not onednn_has_bf16()


def prompt_weights(weights: str, dtype: torch.dtype) -> str:
    """The format prompts prefill in when none is asked for. Dense, whatever the steps' format, where bf16 products
    are native: the int kernels are made for a few rows, and a prompt of hundreds cost them twice what it costs
    dense (512 tokens, AMD EPYC: int4 0.88 s, int8 1.03 s, dense 0.45 s). Where they are not (AVX2 without
    AVX-512), dense bf16 is emulated and q4 steps prefill in q4: 480 tokens took 0.50 s against 2.74 s dense
    (docs/kernels/avx2.md). Greedy and LLMA share the prefill, so replies stay identical either way."""
    return "q4" if bf16_emulated(weights, dtype) else "dense"


@dataclass(frozen=True)
class ModelShape:
    """The sizes the layers compute with, read once from the model's config and first layer."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    eps: float
    intermediate: int
    layers: int
    windows: tuple[int | None, ...]  # the attention kinds: each sliding window, None for full attention
    mask_kind: tuple[int, ...]  # per layer: which of `windows` it attends with

    @classmethod
    def of(cls, model: torch.nn.Module) -> "ModelShape":
        cfg, layers = model.config, model.model.layers
        layer_windows = [_window(cfg, i) for i in range(len(layers))]
        windows = tuple(dict.fromkeys(layer_windows))
        attn = layers[0].self_attn
        return cls(cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim, attn.scaling, cfg.rms_norm_eps,
                   layers[0].mlp.gate_proj.weight.shape[0], len(layers), windows,
                   tuple(windows.index(window) for window in layer_windows))


@dataclass(frozen=True)
class LayerWeights:
    """Every decoder layer's weights in one format, as lists indexed by layer (the scripted layers' attributes)."""

    kernel: int  # the weights' kernel (decoding/weights.py)
    qkv: list[torch.Tensor]  # q, k and v projections stacked: one product
    qkv_scales: list[torch.Tensor]
    qkv_bias: list[torch.Tensor | None]
    o: list[torch.Tensor]
    o_scales: list[torch.Tensor]
    o_bias: list[torch.Tensor | None]
    gate_up: list[torch.Tensor]  # gate and up projections stacked
    gate_up_scales: list[torch.Tensor]
    down: list[torch.Tensor]
    down_scales: list[torch.Tensor]
    input_norm: list[torch.Tensor]
    post_norm: list[torch.Tensor]


class Packer:
    """Lays out `model`'s weights for one machine: oneDNN's prepacked products where it has kernels for the dtype
    (on a CPU without AVX-512 its bf16 path refuses, and bf16 products run through ATen's own, slower than fp32
    there: pick_dtype picks fp32)."""

    def __init__(self, model: torch.nn.Module, width_hint: int = 8) -> None:
        self.model, self.width_hint = model, width_hint
        self.onednn = model.device.type == "cpu" and (model.dtype != torch.bfloat16 or onednn_has_bf16())

    def weight(self, weight: torch.Tensor, weights: str) -> Weight:
        """`weight` held in the format `weights`, laid out for its kernel."""
        return pack_weight(weight, weights, self.onednn, self.width_hint)

    def layers(self, weights: str) -> LayerWeights:
        layers = self.model.model.layers
        attn, mlp = [layer.self_attn for layer in layers], [layer.mlp for layer in layers]
        qkv = [self.weight(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), weights) for a in attn]
        o = [self.weight(a.o_proj.weight, weights) for a in attn]
        gate_up = [self.weight(torch.cat([m.gate_proj.weight, m.up_proj.weight]), weights) for m in mlp]
        down = [self.weight(m.down_proj.weight, weights) for m in mlp]
        return LayerWeights(
            qkv[0].kernel, [w.data for w in qkv], [w.scales for w in qkv], [_qkv_bias(a) for a in attn],
            [w.data for w in o], [w.scales for w in o], [_detached(a.o_proj.bias) for a in attn],
            [w.data for w in gate_up], [w.scales for w in gate_up], [w.data for w in down], [w.scales for w in down],
            [layer.input_layernorm.weight.detach() for layer in layers],
            [layer.post_attention_layernorm.weight.detach() for layer in layers],
        )

    def head(self, weights: str, lane_head: bool) -> Weight:
        """The LM head for layers in `weights`. Under int4 and q4 it stays in the model's dtype (the bundled GGUF
        stores it, the tied embedding, as Q8_0, which bf16 holds nearly as is): the int8 kernel's cost grows with
        every row and the dense one's barely (16 rows: 12.2 against 3.4 ms; 1 row: 2.05 against 2.19 ms; AMD EPYC,
        2 threads), and a shared forward of many replies' rows pays it in full. With `lane_head` that bf16 head
        runs on the lane library's product: where PyTorch emulates bf16, its own took 17.7 ms for 8 rows."""
        if head_format(weights, lane_head) == "lane":
            return lane_head_weight(self.model.lm_head.weight)
        return self.weight(self.model.lm_head.weight, head_format(weights, lane_head))


def head_format(weights: str, lane_head: bool) -> str:
    """The format of the head of layers in `weights`: "lane" (Packer.head), "dense" or the layers' own."""
    if weights == "int8":
        return "int8"
    return "lane" if lane_head else "dense"


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
