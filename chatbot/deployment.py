"""Decisions a whole deployment shares: kept in its database, so every replica decodes a prompt alike.

The step width and the weight format change a bfloat16 reply's last bits, and a measurement can choose
differently on two starts (4 and 8 on one Intel machine): the first replica to start measures them, every
later start reads them.
"""

from pathlib import Path

import torch

from cache import AnswerCache
from decoding import choose_step_width, choose_weights, forward_name, weights_name
from decoding.engine import WeightsChooser, WidthChooser

COST_CURVES_FILE = "cost_curves.json"  # in the data folder: measured forward costs of this machine


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
