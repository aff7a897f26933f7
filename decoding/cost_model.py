"""What forwards cost on this machine, measured: the cost curve the copy policy plans with, and the calibration an
engine is built from (the step width, the weight format), each measured once per machine and kept in a file.

The arithmetic that chooses by the measurements is pure and lives in decoding/cost_curve.py.
"""

import json
import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .batch_probe import short_blocks_keep_their_bits
from .cost_curve import (
    COMPANY,
    DEFAULT_SIZES,
    STEP_WIDTHS,
    UNPADDED_WIDTH,
    CostCurve,
    format_seconds,
    widest_flat_width,
)
from .hardware import device_name, synchronize
from .packed import Lane, PackedLlama
from .recipe import packing_of
from .steps import ONE_TOKEN_STEPS, StepConfig
from .verifier import ModelVerifier
from .weights import WEIGHT_FORMATS, format_refusal, int4_refusal


@torch.inference_mode()
def measure_cost_curve(
    model: torch.nn.Module,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    context_len: int = 256,
    repeats: int = 5,
    steps: StepConfig = ONE_TOKEN_STEPS,
) -> CostCurve:
    """Time verifications of each size on top of a `context_len` KV cache, as the engine runs them.

    Under a padded step width only W is timed: every forward the engine runs is that one; unpadded, the
    sizes below W and W itself.
    """
    if steps.width:
        sizes = (steps.width,) if steps.padded else (*(s for s in sizes if s < steps.width), steps.width)
    vocab = model.config.vocab_size
    verifier = ModelVerifier(model, torch.randint(0, vocab, (context_len,)).tolist(), steps)
    verifier.first_token()
    inputs = {size: torch.randint(0, vocab, (size,)).tolist() for size in sizes}
    timings: dict[int, list[float]] = {size: [] for size in sizes}
    # Sizes take turns within each round, so a burst of load from elsewhere hits them alike instead of
    # inflating one size; the first round only warms up the allocations for each shape.
    for round_ in range(repeats + 1):
        for size in sizes:
            synchronize(model.device)
            start = time.perf_counter()
            verifier.verify(inputs[size])  # one forward: a W-wide block, or all of a variable-width one
            synchronize(model.device)  # verify's argmax syncs already; this says so
            if round_:
                timings[size].append(time.perf_counter() - start)
            verifier.rewind(context_len)
    # Other work on the machine only ever adds time, so the fastest run is the truest cost.
    fastest = [min(timings[size]) for size in sizes]
    # A larger forward never costs less; a running maximum irons out what noise is left.
    monotone = [max(fastest[: i + 1]) for i in range(len(fastest))]
    return CostCurve(sizes, tuple(monotone), context_len, steps.width, steps.padded)


def machine_key(model, steps: StepConfig = ONE_TOKEN_STEPS) -> str:
    """Model shape and packing (decoding/recipe.py), dtype, step width, device (with the GPU's name on CUDA),
    threads, OpenMP wait policy and processor: what the curve depends on."""
    cfg, packing = model.config, packing_of(model)
    dtype = str(next(model.parameters()).dtype)
    shape = f"{cfg.model_type}-{cfg.num_hidden_layers}x{cfg.hidden_size}-v{cfg.vocab_size}-{packing.forward}"
    if packing.weights != "dense":  # dense keys stay as they were, so a machine's measured curves still count
        shape += f"-{packing.weights}"
    if packing.attention != "sdpa":
        shape += f"-{packing.attention}"
    if packing.lane_head:
        shape += "-lane-head"
    width = f"width={steps.width},cache_len={steps.cache_len}" if steps.width else "width=variable"
    if steps.width and not steps.padded:
        width += ",unpadded"
    threads = f"threads={torch.get_num_threads()},omp_wait={os.environ.get('OMP_WAIT_POLICY', 'default')}"
    device = str(model.device)  # CPU keys stay as they were, so a machine's measured curves still count
    if model.device.type == "cuda":
        device += f" {device_name(model.device)}"
    return f"{shape}|{dtype}|{width}|{device}|{threads}|{platform.machine()}|{platform.processor()}"


def load_or_measure(
    model: torch.nn.Module, cache_file: Path | None, steps: StepConfig = ONE_TOKEN_STEPS
) -> CostCurve:
    """The curve for this model, machine and step width, read from `cache_file` or measured and saved there."""
    key = machine_key(model, steps)
    stored = _read(cache_file)
    if key in stored:
        return CostCurve.from_json(stored[key])
    curve = measure_cost_curve(model, steps=steps)
    _store(cache_file, key, curve.to_json())
    return curve


def _store(cache_file: Path | None, key: str, value) -> None:
    if cache_file is None:
        return
    stored = _read(cache_file)
    stored[key] = value
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(stored, indent=1))
    tmp.replace(cache_file)


def _read(cache_file: Path | None) -> dict:
    if cache_file is None or not cache_file.exists():
        return {}
    try:
        return json.loads(cache_file.read_text())
    except (OSError, ValueError):
        return {}  # a damaged cache file only costs a re-measurement


def wants_fixed_width(model) -> bool:
    """W-wide steps where they are flat in cost and needed for bit-identity: the packed forward (fp32 or bf16;
    a few rows cost about what one does once weights are prepacked) and bf16 anywhere. transformers' fp32
    forward keeps one-token steps: there an 8-wide step costs about twice a one-token one."""
    return packing_of(model).forward == "packed" or model.dtype == torch.bfloat16


def choose_step_width(model, cache_file: Path | None = None) -> int | None:
    """The step width for `model` on this machine: None (one-token steps) where fixed widths do not pay,
    else the widest of STEP_WIDTHS whose forward costs at most FLAT_TOLERANCE x a one-token forward, and
    at least the narrowest. Measured once per machine and kept in `cache_file`, so a restart keeps it (and
    the replies it gives).

    Measured on the bundled model, packed bf16, AMD EPYC (AVX512-BF16, no AMX), 300-token context: 1 row
    17.6 ms, 4 rows 1.06x, 8 rows 1.20x, 16 rows 1.38x: W = 4 there. On a CPU with AMX, 8-16 rows cost
    about what one does.
    """
    if not wants_fixed_width(model):
        return None
    return chosen_step(model, cache_file).width


@dataclass(frozen=True)
class ChosenStep:
    """The step width chosen for a packed model, and what one step that wide cost when it was chosen."""

    width: int
    seconds: float | None  # None: chosen by an earlier start that kept only the width


def chosen_step(model, cache_file: Path | None = None) -> ChosenStep:
    """choose_step_width's measurement, kept in `cache_file`: the width and its step's seconds, which
    choose_weights compares across formats."""
    key = machine_key(model) + "|step-width"
    stored = _read(cache_file)
    if key in stored:
        return ChosenStep(int(stored[key]), stored.get(machine_key(model) + "|step-seconds"))
    cost = {n: measure_cost_curve(model, steps=StepConfig(n, 512), repeats=7).seconds[0] for n in (1, *STEP_WIDTHS)}
    width = widest_flat_width(cost)
    seconds = cost[width]  # what choose_weights compares: the formats' flat steps
    width = unpadded_width(model, width)
    _store(cache_file, key, width)
    _store(cache_file, machine_key(model) + "|step-seconds", seconds)
    return ChosenStep(width, seconds)


def unpadded_width(model, width: int) -> int:
    """UNPADDED_WIDTH where it is wider than `width` and this machine's kernels give a short block alone the bits
    it gets padded (batch_probe.short_blocks_keep_their_bits), so steps run unpadded; else `width`."""
    wider = width < UNPADDED_WIDTH and packing_of(model).forward == "packed"
    return UNPADDED_WIDTH if wider and short_blocks_keep_their_bits(model, UNPADDED_WIDTH) else width


def weight_formats(model: torch.nn.Module) -> list[str]:
    """The weight formats the packed forward can hold this transformers model in, "dense" first."""
    allowed = [f for f in WEIGHT_FORMATS if format_refusal(f, model.dtype, model.device) is None]
    products = [m.weight for m in model.model.layers[0].modules() if isinstance(m, torch.nn.Linear)]
    if any(int4_refusal(w) for w in (*products, model.lm_head.weight)):
        allowed = [f for f in allowed if f not in ("int4", "q4")]
    return allowed


def choose_weights(model: torch.nn.Module, cache_file: Path | None = None) -> str:
    """The weight format for the packed forward on this machine: the one whose chosen W-wide step
    (choose_step_width) plus its share of a busy helpdesk's shared forward (COMPANY) costs least, so that
    neither a lone customer nor a full house is served by a format made for the other. A step reads every
    weight once, so fewer bytes a weight usually wins alone; but PyTorch's int kernels widen weights to bf16
    row by row, so their cost grows faster with the rows a forward holds (measured, Intel Xeon without AMX,
    2 threads: int4 1 row 12.8 ms, 2 rows 1.18x, 4 rows 1.46x; bf16 24.6 ms, 1.08x, 1.19x), and q4 widens
    each weight once for 8 rows. Measured once per machine and kept in `cache_file`, like the width. `model`:
    the transformers model, before it is packed."""
    formats = weight_formats(model)
    if len(formats) == 1:
        return formats[0]
    seconds = {}
    for weights in formats:
        packed = PackedLlama(model, weights=weights)
        step = chosen_step(packed, cache_file)
        if step.seconds is None:  # an earlier start kept the width only: time that one width
            step = replace(step, seconds=measure_cost_curve(packed, steps=StepConfig(step.width, 512)).seconds[0])
        seconds[weights] = format_seconds(step.seconds, company_seconds(packed, cache_file))
    return min(formats, key=seconds.__getitem__)


def company_seconds(model: PackedLlama, cache_file: Path | None = None) -> float:
    """Seconds of one shared decode forward of COMPANY's replies at a 256-token context; kept in `cache_file`."""
    key = machine_key(model) + "|company-{}x{}-seconds".format(*COMPANY)
    stored = _read(cache_file)
    if key in stored:
        return float(stored[key])
    seconds = measure_company(model, *COMPANY)
    _store(cache_file, key, seconds)
    return seconds


@torch.inference_mode()
def measure_company(model: PackedLlama, lanes: int, rows: int, repeats: int = 5) -> float:
    """The fastest of `repeats` forwards of `lanes` replies' `rows` rows each, every reply over its own cache."""
    vocab, context, steps = model.config.vocab_size, 256, StepConfig(rows, 512)
    batch = [Lane(torch.randint(0, vocab, (rows,), device=model.device), context, model.new_cache(steps.cache_len),
                  steps.key_len(context)) for _ in range(lanes)]
    model.forward_lanes(batch)  # allocations
    timings = []
    for _ in range(repeats):
        synchronize(model.device)
        start = time.perf_counter()
        model.forward_lanes(batch)
        synchronize(model.device)  # on CUDA the forward returns once its kernels are queued
        timings.append(time.perf_counter() - start)
    return min(timings)
