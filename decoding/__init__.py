"""LLMA decoding (Inference with Reference, Yang et al. 2023): lossless, reference-assisted greedy decoding."""

from .cost_model import CostCurve, load_or_measure, measure_cost_curve
from .generate import (
    Chunk,
    CopiedRun,
    DecodeResult,
    default_policy,
    greedy_generate,
    greedy_stream,
    llma_generate,
    llma_stream,
)
from .model_loading import ModelLoadError, load_model, prepare_bundled_model
from .policy import AdaptiveCopyPolicy, FixedCopyPolicy, best_copy_len
from .reference_index import OUTPUT_SOURCE, PROMPT_SOURCE, Match, ReferenceIndex

__all__ = [
    "OUTPUT_SOURCE",
    "PROMPT_SOURCE",
    "AdaptiveCopyPolicy",
    "Chunk",
    "CopiedRun",
    "CostCurve",
    "DecodeResult",
    "FixedCopyPolicy",
    "Match",
    "ModelLoadError",
    "ReferenceIndex",
    "best_copy_len",
    "default_policy",
    "greedy_generate",
    "greedy_stream",
    "llma_generate",
    "llma_stream",
    "load_model",
    "load_or_measure",
    "measure_cost_curve",
    "prepare_bundled_model",
]
