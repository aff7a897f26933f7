"""One loaded model made ready to decode: which forward runs and how wide every step is, decided once here.

Everything that names the forward or the width (the app's engine line, each reply's stats, the cost-curve
keys, the bench's rows) reads it from the `Engine` this module returns, never from the model's type.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .batch_probe import short_blocks_keep_their_bits
from .cost_model import choose_step_width, choose_weights
from .hardware import device_name
from .model_loading import load_model
from .packed import DEFAULT_PREFIX_CACHE_BYTES, PackedLlama
from .packing import packing_refusal
from .recipe import packing_of
from .steps import PREFILL_CHUNK, StepConfig, sized_steps
from .weights import WEIGHT_FORMATS, format_refusal

WEIGHTS_SETTINGS = ("auto", *WEIGHT_FORMATS)  # auto: measured, choose_weights

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"  # what the bundled model's cached answers are kept under


class EngineConfigError(ValueError):
    """A combination of settings under which LLMA would not be identical to greedy decoding."""


@dataclass(frozen=True)
class StepWidth:
    """The step-width setting: "auto" (measured, `choose_step_width`), one-token steps, or every forward W wide."""

    kind: str  # "auto", "one-token" or "fixed"
    width: int = 0  # W, for "fixed"

    def __post_init__(self) -> None:
        if self.kind not in ("auto", "one-token", "fixed") or (self.kind == "fixed") != (self.width > 0):
            raise ValueError(f"not a step width: {self.kind} {self.width}")

    @classmethod
    def parse(cls, value: "str | int | StepWidth") -> "StepWidth":
        """"auto"; 0 for one-token steps; a positive W. Anything else is refused with a message."""
        if isinstance(value, StepWidth):
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return AUTO
        if not text.lstrip("-").isdigit() or int(text) < 0:
            raise ValueError(f"step width must be auto, 0 (one-token steps) or a positive number, not {value!r}")
        return cls("fixed", int(text)) if int(text) else ONE_TOKEN

    def __str__(self) -> str:
        return {"auto": "auto", "one-token": "0"}.get(self.kind, str(self.width))


AUTO = StepWidth("auto")
ONE_TOKEN = StepWidth("one-token")


@dataclass(frozen=True)
class Engine:
    """A model ready to decode: the forward that runs (`model` is exactly what the runners get) and its width."""

    model: torch.nn.Module  # a PackedLlama for the packed forward, else transformers' model
    tokenizer: object
    model_id: str
    step_width: int | None  # every decode forward this wide; None: one-token steps (never "auto" here)
    padded_steps: bool = True  # short blocks padded to the width (False where measured needless: StepConfig)

    @property
    def forward(self) -> str:
        """"packed" or "transformers": the one name every label reads (the forward's packing, decoding/recipe.py)."""
        return packing_of(self.model).forward

    @property
    def weights(self) -> str:
        """"dense" (the model's dtype), "int8", "int4" or "q4": how the packed forward holds its weights."""
        return packing_of(self.model).weights

    @property
    def attention(self) -> str:
        """"kernel", "batched" or "sdpa": how decode steps attend."""
        return packing_of(self.model).attention

    @property
    def prefill_attention(self) -> str:
        """"kernel" or "sdpa": how prompts attend; transformers' forward: "sdpa"."""
        return packing_of(self.model).prefill_attention

    @property
    def prefill_weights(self) -> str:
        """The weight format prompts are prefilled in: dense for every format here."""
        return packing_of(self.model).prefill_weights

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def prefill_chunk(self) -> int | None:
        """Tokens a prompt is prefilled in at a time; None: in one forward (transformers' forward)."""
        return PREFILL_CHUNK if self.forward == "packed" else None

    def steps(self, prompt_len: int, max_new_tokens: int, beginning: int = 0) -> StepConfig:
        """The shape of every decode forward for this prompt and reply budget (greedy and LLMA alike); the prompt's
        chunks break where its shared `beginning` of that many tokens ends (StepConfig.prefill_break)."""
        return sized_steps(self.step_width, prompt_len, max_new_tokens, self.padded_steps, self.prefill_chunk,
                           cross_granules=self.attention == "kernel", prefill_break=beginning)

    def describe(self) -> str:
        """The engine line printed at start, e.g. "bfloat16 on cpu, packed forward, 4-wide decode steps (CPU)"; on CUDA
        the GPU's name in the brackets."""
        steps = f"{self.step_width}-wide decode steps" if self.step_width else "one-token decode steps"
        if self.step_width and not self.padded_steps:
            steps += ", short ones unpadded"
        where = f"{str(self.dtype).removeprefix('torch.')} on {self.device}"
        weights = f", {self.weights} weights" if self.weights != "dense" else ""
        if self.prefill_weights != self.weights:
            weights += f" ({self.prefill_weights} prefill)"
        if self.attention == "kernel":
            weights += ", lane-kernel attention"  # prompts' too (PackedLlama.prefill_attention)
        elif self.attention == "batched":
            weights += ", batched attention"  # decode steps' only; prompts attend through SDPA
        return f"{where}, {self.forward} forward{weights}, {steps} ({device_name(self.device)})"


WidthChooser = Callable[[torch.nn.Module], "int | None"]
WeightsChooser = Callable[[torch.nn.Module], str]


def build_engine(
    model: torch.nn.Module, tokenizer, model_id: str, width: StepWidth = AUTO,
    choose_width: WidthChooser = choose_step_width, weights: str = "dense",
    choose_format: WeightsChooser = choose_weights, prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> Engine:
    """Settle the weight format (`choose_format` for "auto"), pack the model where the architecture allows,
    settle the width (`choose_width` for "auto"), and decide the forward: the packed one runs W-wide steps
    only, so one-token steps run transformers' own forward. Short blocks run unpadded where measured safe."""
    weights = settle_weights(model, weights, width, choose_format)
    model = pack_model(model, weights=weights, prefix_cache_bytes=prefix_cache_bytes)
    step_width = {"auto": None, "one-token": None, "fixed": width.width}[width.kind]
    if width.kind == "auto":
        step_width = choose_width(model)
    if step_width is None and packing_of(model).forward == "packed":
        model = model.source
    refuse_lossy(model, step_width)
    return Engine(model, tokenizer, model_id, step_width, padded_steps=needs_padding(model, step_width))


def needs_padding(model: torch.nn.Module, step_width: int | None) -> bool:
    """Whether short blocks must be padded to the width: yes unless the packed forward's rows were measured
    to keep their bits in shorter blocks (decoding/batch_probe.py; about a second at start)."""
    if step_width is None or step_width == 1 or packing_of(model).forward != "packed":
        return True
    return not short_blocks_keep_their_bits(model, step_width)


def settle_weights(model: torch.nn.Module, weights: str, width: StepWidth, choose_format: WeightsChooser) -> str:
    """The weight format to pack in: "auto" measures where there is a choice; an int format the model or
    the width cannot run is refused with the reason."""
    if weights not in WEIGHTS_SETTINGS:
        raise EngineConfigError(f"weights must be one of {', '.join(WEIGHTS_SETTINGS)}, not {weights!r}")
    packable = packing_refusal(model) is None and width != ONE_TOKEN
    if weights == "auto":
        return choose_format(model) if packable else "dense"
    if weights == "dense":
        return weights
    refusal = packing_refusal(model) or format_refusal(weights, model.dtype, model.device)
    if refusal is None and width == ONE_TOKEN:
        refusal = "one-token steps run transformers' forward, which holds dense weights only"
    if refusal is not None:
        raise EngineConfigError(f"{weights} weights are not possible here: {refusal}")
    return weights


def refuse_lossy(model: torch.nn.Module, step_width: int | None) -> None:
    """Refuse settings under which LLMA would not equal greedy decoding (check_lossless) for this model."""
    check_lossless(next(model.parameters()).dtype, step_width)


def check_lossless(dtype: torch.dtype, step_width: int | None) -> None:
    """bfloat16 with one-token steps: a verification's rows may round unlike a one-token step's at a near-tie,
    so LLMA would not equal greedy (measured: 39 and 41 of 50 hostile cases identical on tiny Qwen3 and Phi3)."""
    if step_width is None and dtype == torch.bfloat16:
        raise EngineConfigError(
            "bfloat16 with one-token steps (step width 0) is refused: there LLMA's replies can differ from greedy "
            "decoding. Use a step width of at least 1 (or auto), or float32."
        )


def pack_model(
    model: torch.nn.Module, width_hint: int = 8, weights: str = "dense",
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> "PackedLlama | torch.nn.Module":
    """The packed forward where the model allows it, else the model itself (transformers' forward)."""
    if packing_refusal(model) is not None:
        return model
    return PackedLlama(model, weights=weights, prefix_cache_bytes=prefix_cache_bytes, width_hint=width_hint)


def forward_name(model) -> str:
    """Which forward decodes with `model`: "packed" or "transformers" (the deployment's keys)."""
    return packing_of(model).forward


def weights_name(model) -> str:
    """How the forward holds its weights: "int8", "int4" or "q4" (packed only), else "dense" (the model's dtype)."""
    return packing_of(model).weights


def attention_name(model) -> str:
    """How decode steps attend: "kernel" (the lane kernel, decoding/csrc), "batched" (one SDPA call for every lane,
    CUDA) or "sdpa" (lane by lane: every reply before them)."""
    return packing_of(model).attention


def load_engine(
    path: str | Path | None = None, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
    width: StepWidth = AUTO, choose_width: WidthChooser = choose_step_width, weights: str = "dense",
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> Engine:
    """The model at `path` (the bundled SmolLM2 when None) as an Engine: the service's and the bench's one way in."""
    model, tokenizer = load_model(path, dtype=dtype, device=device)
    return build_engine(
        model, tokenizer, str(path or DEFAULT_MODEL_ID), width, choose_width, weights,
        prefix_cache_bytes=prefix_cache_bytes,
    )
