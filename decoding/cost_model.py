"""What one verification forward pass costs, by the number of tokens it checks.

On a CPU the fixed overhead of a forward dominates: checking 16 tokens costs about twice one.
The adaptive copy policy weighs the expected accepted tokens against this curve.
"""

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .forward import forward_tokens, new_kv_cache, truncate_kv_cache

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one forward pass of `sizes[i]` new tokens over a warm KV cache."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    context_len: int = 256

    def cost(self, n_tokens: int) -> float:
        """Seconds for a forward of n_tokens, interpolated linearly between measured sizes."""
        sizes, secs = self.sizes, self.seconds
        if n_tokens <= sizes[0]:
            return secs[0]
        for i in range(1, len(sizes)):
            if n_tokens <= sizes[i]:
                share = (n_tokens - sizes[i - 1]) / (sizes[i] - sizes[i - 1])
                return secs[i - 1] + (secs[i] - secs[i - 1]) * share
        slope = (secs[-1] - secs[-2]) / (sizes[-1] - sizes[-2])
        return secs[-1] + slope * (n_tokens - sizes[-1])

    def relative(self, n_tokens: int) -> float:
        """Cost of a forward of n_tokens in units of a one-token step."""
        return self.cost(n_tokens) / self.cost(1)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "CostCurve":
        return cls(tuple(data["sizes"]), tuple(data["seconds"]), int(data.get("context_len", 256)))


@torch.inference_mode()
def measure_cost_curve(
    model: torch.nn.Module, sizes: tuple[int, ...] = DEFAULT_SIZES, context_len: int = 256, repeats: int = 5
) -> CostCurve:
    """Time forwards of each size on top of a `context_len` KV cache, as a decode step would run."""
    vocab = model.config.vocab_size
    context = torch.randint(0, vocab, (1, context_len))
    cache = new_kv_cache(model)
    forward_tokens(model, context, cache, logits_to_keep=1)
    drafts = {size: torch.randint(0, vocab, (1, size)) for size in sizes}
    timings: dict[int, list[float]] = {size: [] for size in sizes}
    # Sizes take turns within each round, so a burst of load from elsewhere hits them alike instead of
    # inflating one size; the first round only warms up the allocations for each shape.
    for round_ in range(repeats + 1):
        for size in sizes:
            start = time.perf_counter()
            forward_tokens(model, drafts[size], cache, logits_to_keep=size)
            if round_:
                timings[size].append(time.perf_counter() - start)
            truncate_kv_cache(cache, context_len)
    # Other work on the machine only ever adds time, so the fastest run is the truest cost.
    fastest = [min(timings[size]) for size in sizes]
    # A larger forward never costs less; a running maximum irons out what noise is left.
    monotone = [max(fastest[: i + 1]) for i in range(len(fastest))]
    return CostCurve(tuple(sizes), tuple(monotone), context_len)


def machine_key(model: torch.nn.Module) -> str:
    """Identifies model shape, dtype, threads, OpenMP wait policy and processor: what the curve depends on."""
    cfg = model.config
    dtype = str(next(model.parameters()).dtype)
    shape = f"{cfg.model_type}-{cfg.num_hidden_layers}x{cfg.hidden_size}-v{cfg.vocab_size}"
    threads = f"threads={torch.get_num_threads()},omp_wait={os.environ.get('OMP_WAIT_POLICY', 'default')}"
    return f"{shape}|{dtype}|{threads}|{platform.machine()}|{platform.processor()}"


def load_or_measure(model: torch.nn.Module, cache_file: Path | None) -> CostCurve:
    """The curve for this model and machine, read from `cache_file` or measured and saved there."""
    key = machine_key(model)
    stored = _read(cache_file)
    if key in stored:
        return CostCurve.from_json(stored[key])
    curve = measure_cost_curve(model)
    if cache_file is not None:
        stored[key] = curve.to_json()
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(stored, indent=1))
        tmp.replace(cache_file)
    return curve


def _read(cache_file: Path | None) -> dict:
    if cache_file is None or not cache_file.exists():
        return {}
    try:
        return json.loads(cache_file.read_text())
    except (OSError, ValueError):
        return {}  # a damaged cache file only costs a re-measurement
