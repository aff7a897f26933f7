"""LLMA decoding (Inference with Reference, Yang et al. 2023): lossless, reference-assisted greedy decoding.

What the other packages use; everything else is imported from its module.
"""

from .cost_curve import CostCurve
from .cost_model import choose_step_width, choose_weights, load_or_measure, measure_cost_curve
from .engine import (
    AUTO,
    ONE_TOKEN,
    WEIGHTS_SETTINGS,
    Engine,
    EngineConfigError,
    StepWidth,
    build_engine,
    check_lossless,
    forward_name,
    load_engine,
    may_hold_integer_weights,
    weights_name,
)
from .greedy import greedy_generate, scheduled_greedy
from .hardware import CpuFeatures, cpu_features, pick_device, pick_dtype
from .llma import LlmaOptions, llma_generate, llma_stream
from .model_loading import ModelLoadError, load_model
from .packed import DEFAULT_PREFIX_CACHE_BYTES, PackedLlama
from .policy import AdaptiveCopyPolicy, CopyPolicy, FixedCopyPolicy
from .recipe import DecodeRecipe
from .reference_index import OUTPUT_SOURCE, PROMPT_SOURCE
from .repetition import NAMED_RULES, RECOMMENDED_REPETITION_RULE, REPETITION_OFF, RepetitionRule
from .result import Chunk, CopiedRun, DecodeResult
from .scheduler import Scheduler, Sharing, scheduled_llma_stream
from .steps import ONE_TOKEN_STEPS, StepConfig
from .threads import in_passing_thread, one_core_here

__all__ = [
    "AUTO",
    "DEFAULT_PREFIX_CACHE_BYTES",
    "NAMED_RULES",
    "ONE_TOKEN",
    "ONE_TOKEN_STEPS",
    "OUTPUT_SOURCE",
    "PROMPT_SOURCE",
    "RECOMMENDED_REPETITION_RULE",
    "REPETITION_OFF",
    "WEIGHTS_SETTINGS",
    "AdaptiveCopyPolicy",
    "Chunk",
    "CopiedRun",
    "CopyPolicy",
    "CostCurve",
    "CpuFeatures",
    "DecodeRecipe",
    "DecodeResult",
    "Engine",
    "EngineConfigError",
    "FixedCopyPolicy",
    "LlmaOptions",
    "ModelLoadError",
    "PackedLlama",
    "RepetitionRule",
    "Scheduler",
    "Sharing",
    "StepConfig",
    "StepWidth",
    "build_engine",
    "check_lossless",
    "choose_step_width",
    "choose_weights",
    "cpu_features",
    "forward_name",
    "greedy_generate",
    "in_passing_thread",
    "llma_generate",
    "llma_stream",
    "load_engine",
    "may_hold_integer_weights",
    "load_model",
    "load_or_measure",
    "measure_cost_curve",
    "one_core_here",
    "pick_device",
    "pick_dtype",
    "scheduled_greedy",
    "scheduled_llma_stream",
    "weights_name",
]
