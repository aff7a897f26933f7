"""Decisions a whole deployment shares: kept in its database, so every replica decodes a prompt alike.

The step width and the weight format change a bfloat16 reply's last bits, and a measurement can choose
differently on two starts (4 and 8 on one Intel machine): the first replica to start measures them, every
later start reads them. Also what a deployment opens around its engine: the answer cache with its embedding
model, and the scheduler that owns the packed forward.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from cache import AnswerCache, Embedder
from decoding import (
    Engine,
    Scheduler,
    choose_step_width,
    choose_weights,
    forward_name,
    in_passing_thread,
    one_core_here,
    weights_name,
)
from decoding.engine import WeightsChooser, WidthChooser

COST_CURVES_FILE = "cost_curves.json"  # in the data folder: measured forward costs of this machine


@dataclass(frozen=True)
class EngineSummary:
    """How this replica decodes, and the step width the deployment chose (kept in its database)."""

    line: str  # the engine line printed at start
    step_width: int | None  # this replica's: every decode forward this wide; None: one-token steps
    deployment_step_width: int | None  # the first choice of "auto", shared by every replica; None: one-token steps
    deployment_chose: bool = False  # whether the deployment's database holds that choice


def step_width_key(model_id: str, model: torch.nn.Module) -> str:
    """The setting's name: one width per model, dtype, forward and weight format (dense keeps its old name)."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    weights = f"|{weights_name(model)}" if weights_name(model) != "dense" else ""
    return f"step_width|{model_id}|{dtype}|{forward_name(model)}{weights}"


def weights_key(model_id: str, model: torch.nn.Module) -> str:
    """The setting's name: one weight format per model and dtype."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return f"weights|{model_id}|{dtype}"


def shared_width_chooser(cache: AnswerCache, cost_file: Path, model_id: str) -> WidthChooser:
    """An "auto" step width: the deployment's, or measured here and claimed for it (first claim wins)."""

    def choose(model: torch.nn.Module) -> int | None:
        key = step_width_key(model_id, model)
        stored = cache.deployment_setting(key)
        if stored is None:
            measured = choose_step_width(model, cost_file)
            stored = cache.claim_deployment_setting(key, str(measured or 0))
        return int(stored) or None

    return choose




def shared_weights_chooser(cache: AnswerCache, cost_file: Path, model_id: str) -> WeightsChooser:
    """An "auto" weight format: the deployment's, or measured here and claimed for it (first claim wins)."""

    def choose(model: torch.nn.Module) -> str:
        key = weights_key(model_id, model)
        stored = cache.deployment_setting(key)
        if stored is None:
            stored = cache.claim_deployment_setting(key, choose_weights(model, cost_file))
        return stored

    return choose


def open_scheduler(engine: Engine, max_concurrent_replies: int) -> Scheduler | None:
    """The scheduler that owns the packed forward, serving one reply at a time where that is asked for (as before
    continuous batching): its thread is then still the only one that computes on several cores (see
    decoding/threads.py); None on transformers' forward, whose replies take turns in their own threads."""
    if engine.forward != "packed":
        return None
    return Scheduler.checked(
        engine.model, engine.step_width, max_concurrent_replies, short_lanes=not engine.padded_steps
    )


def open_cache(
    data_dir: str | Path, db_url: str | None, max_entries: int, embedding_model: str, embedding_dtype: str = "float32",
) -> AnswerCache:
    """The answer cache with the embedding model it indexes questions with (a name or a folder), run in
    `embedding_dtype`."""
    # Loaded in a thread that ends: casting to bfloat16 runs parallel regions, and the calling thread (a script's
    # main thread, say) would keep their OpenMP team for good, which slows every step of the scheduler's (0.70 s
    # against 0.36 for 64 greedy tokens; decoding/threads.py).
    embedder = in_passing_thread(lambda: Embedder.named(embedding_model, embedding_dtype))

    def embed(texts: list[str]):
        one_core_here()  # while the scheduler's thread computes on several cores (decoding/threads.py)
        return embedder.embed(texts)

    return AnswerCache.open(
        Path(data_dir), embed=embed, dim=embedder.dim, url=db_url, max_entries=max_entries,
        embedder_name=embedder.name,
    )
