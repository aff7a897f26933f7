"""One loaded model made ready to decode: its `DecodeRecipe` (decoding/recipe.py), settled once here from one
calibration, and the forward that recipe names.

The module that builds engines: it settles the weight format and the step width (measured for "auto",
decoding/cost_model.py), packs the model where the architecture allows, probes whether short blocks keep their bits
unpadded (decoding/batch_probe.py), and refuses settings under which LLMA would not equal greedy decoding. Everything
that names how a reply is decoded reads the engine's recipe, and staff's Verify rebuilds a stored reply's forward
from its recipe alone (`forward_for`).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .batch_probe import short_blocks_keep_their_bits
from .cost_model import choose_step_width, choose_weights
from .hardware import device_name
from .lane_kernel import kernel_paths
from .model_loading import load_model
from .packed import DEFAULT_PREFIX_CACHE_BYTES, PackedLlama
from .packing import packing_refusal
from .prefix_cache import PrefixCache
from .recipe import DecodeRecipe, packing_of
from .steps import StepConfig
from .weights import WEIGHT_FORMATS, format_refusal

WEIGHTS_SETTINGS = ("auto", *WEIGHT_FORMATS)  # auto: measured, choose_weights

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"  # what the bundled model's cached answers are kept under


class EngineConfigError(ValueError):
    """A combination of settings under which LLMA would not be identical to greedy decoding."""


@dataclass(frozen=True)
class StepWidth:
    """The step-width setting: "auto" (measured, `choose_step_width`), one-token steps, or every forward W wide.

    Its text is "auto", "0" (one-token steps) or W; in a recipe one-token steps are a width of None."""

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
    """A model ready to decode: the forward that runs (`model` is exactly what the runners get) and its recipe."""

    model: torch.nn.Module  # the packed forward (PackedLlama) or transformers' model, as `recipe.forward` says
    tokenizer: object
    model_id: str
    recipe: DecodeRecipe

    # The recipe's fields, read where an engine is at hand (the stats, the bench's rows, the scheduler).
    @property
    def forward(self) -> str:
        return self.recipe.forward

    @property
    def weights(self) -> str:
        return self.recipe.weights

    @property
    def prefill_weights(self) -> str:
        return self.recipe.prefill_weights

    @property
    def attention(self) -> str:
        return self.recipe.attention

    @property
    def prefill_attention(self) -> str:
        return self.recipe.prefill_attention

    @property
    def lane_head(self) -> bool:
        return self.recipe.lane_head

    @property
    def step_width(self) -> int | None:
        return self.recipe.step_width

    @property
    def padded_steps(self) -> bool:
        return self.recipe.padded_steps

    @property
    def prefill_chunk(self) -> int | None:
        return self.recipe.prefill_chunk

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def source(self) -> torch.nn.Module:
        """The transformers model the forward runs (or was packed from)."""
        return self.model.source if self.recipe.forward == "packed" else self.model

    @property
    def prefixes(self) -> PrefixCache | None:
        """The packed forward's prompt chunks kept for reuse; None on transformers' forward, which keeps none."""
        return self.model.prefixes if self.recipe.forward == "packed" else None

    def steps(self, prompt_len: int, max_new_tokens: int, beginning: int = 0) -> StepConfig:
        """The shape of every decode forward for this prompt and reply budget (DecodeRecipe.steps)."""
        return self.recipe.steps(prompt_len, max_new_tokens, beginning)

    def describe(self) -> str:
        """The engine line printed at start, e.g. "bfloat16 on cpu, packed forward, 4-wide decode steps (CPU)"; on CUDA
        the GPU's name in the brackets."""
        where = f"{str(self.dtype).removeprefix('torch.')} on {self.device}"
        machine = device_name(self.device)
        if self.recipe.attention == "kernel" and kernel_paths():
            machine += f"; {kernel_paths()} kernels"  # which vector paths of the lane library run here
        return f"{where}, {self.recipe.describe()} ({machine})"

    @classmethod
    def of(cls, forward, tokenizer, model_id: str, step_width: int | None, padded_steps: bool = True) -> "Engine":
        """An engine around a forward built by hand (the tests'), its recipe read off the forward's packing."""
        return cls(forward, tokenizer, model_id, DecodeRecipe.of(packing_of(forward), step_width, padded_steps))

    def rebuilt(self, recipe: DecodeRecipe) -> "Engine":
        """This model under another recipe (a stored reply's, for staff's Verify): this engine's forward where the
        packing is the same, else one packed for the recipe (no prompt chunks kept: older replies are few)."""
        if recipe.packing == self.recipe.packing:
            return Engine(self.model, self.tokenizer, self.model_id, recipe)
        return Engine(forward_for(self.source, recipe), self.tokenizer, self.model_id, recipe)


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
    forward = model if width == ONE_TOKEN else pack_model(model, weights=weights, prefix_cache_bytes=prefix_cache_bytes)
    step_width = width.width if width.kind == "fixed" else None
    if width.kind == "auto":
        step_width = choose_width(forward)
    if step_width is None:
        forward = model
    check_lossless(model.dtype, step_width)
    recipe = DecodeRecipe.of(packing_of(forward), step_width, needs_padding(forward, step_width))
    return Engine(forward, tokenizer, model_id, recipe)


def forward_for(source: torch.nn.Module, recipe: DecodeRecipe, prefix_cache_bytes: int = 0) -> torch.nn.Module:
    """The forward `recipe` names, built from the transformers model `source`: `source` itself, or a packing of it
    (ValueError where this machine cannot run that packing, e.g. the lane kernel where it does not build)."""
    if recipe.forward == "transformers":
        return source
    return PackedLlama(
        source, weights=recipe.weights, prefill_weights=recipe.prefill_weights,
        lane_kernel=recipe.attention == "kernel", batched_attention=recipe.attention == "batched",
        prefill_attention=recipe.prefill_attention, lane_head=recipe.lane_head, prefix_cache_bytes=prefix_cache_bytes,
    )


def pack_model(
    model: torch.nn.Module, width_hint: int = 8, weights: str = "dense",
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> "PackedLlama | torch.nn.Module":
    """The packed forward where the model allows it, else the model itself (transformers' forward)."""
    if packing_refusal(model) is not None:
        return model
    return PackedLlama(model, weights=weights, prefix_cache_bytes=prefix_cache_bytes, width_hint=width_hint)


def needs_padding(forward, step_width: int | None) -> bool:
    """Whether short blocks must be padded to the width: yes unless the packed forward's rows were measured
    to keep their bits in shorter blocks (decoding/batch_probe.py; about a second at start)."""
    if step_width is None or step_width == 1 or packing_of(forward).forward != "packed":
        return True
    return not short_blocks_keep_their_bits(forward, step_width)


def may_hold_integer_weights(weights: str, width: StepWidth) -> bool:
    """Whether the packed forward may hold int weights under these settings (what `pick_dtype` asks): one-token steps
    run transformers' forward, dense only."""
    return weights != "dense" and width != ONE_TOKEN


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


def check_lossless(dtype: torch.dtype, step_width: int | None) -> None:
    """bfloat16 with one-token steps: a verification's rows may round unlike a one-token step's at a near-tie,
    so LLMA would not equal greedy (measured: 39 and 41 of 50 hostile cases identical on tiny Qwen3 and Phi3).
    Checked once, when the engine is built."""
    if step_width is None and dtype == torch.bfloat16:
        raise EngineConfigError(
            "bfloat16 with one-token steps (step width 0) is refused: there LLMA's replies can differ from greedy "
            "decoding. Use a step width of at least 1 (or auto), or float32."
        )


def forward_name(model) -> str:
    """Which forward decodes with `model`: "packed" or "transformers" (the deployment's keys)."""
    return packing_of(model).forward


def weights_name(model) -> str:
    """How the forward holds its weights: "int8", "int4" or "q4" (packed only), else "dense" (the model's dtype)."""
    return packing_of(model).weights


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
