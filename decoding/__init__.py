"""LLMA decoding (Inference with Reference, Yang et al. 2023): lossless, reference-assisted greedy decoding."""

from .cost_model import CostCurve, choose_step_width, choose_weights, load_or_measure, measure_cost_curve
from .engine import (
    AUTO,
    ONE_TOKEN,
    WEIGHTS_SETTINGS,
    Engine,
    EngineConfigError,
    StepWidth,
    build_engine,
    check_lossless,
    load_engine,
)
from .forward import wants_fixed_width
from .greedy import greedy_generate, greedy_stream
from .hardware import CpuFeatures, cpu_features, pick_device, pick_dtype
from .llma import LlmaOptions, ModelVerifier, Verifier, llma_generate, llma_steps, llma_stream
from .model_loading import ModelLoadError, load_model, prepare_bundled_model
from .packed import (
    DEFAULT_PREFIX_CACHE_BYTES,
    PackedLlama,
    attention_name,
    forward_name,
    pack_model,
    packing_refusal,
    weights_name,
)
from .policy import AdaptiveCopyPolicy, CopyPolicy, Drafter, FixedCopyPolicy, best_copy_len
from .prefix_cache import PrefixCache
from .reference_index import OUTPUT_SOURCE, PROMPT_SOURCE, Match, ReferenceIndex
from .repetition import NAMED_RULES, RECOMMENDED_REPETITION_RULE, REPETITION_OFF, RepetitionRule
from .result import Chunk, CopiedRun, DecodeResult
from .scheduler import Scheduler, Sharing, scheduled_greedy, scheduled_llma_stream
from .steps import (
    ONE_TOKEN_STEPS,
    PREFILL_CHUNK,
    UNKNOWN,
    StepConfig,
    sized_steps,
    verify_in_blocks,
)
from .threads import in_passing_thread, one_core_here

__all__ = [
    "AUTO",
    "DEFAULT_PREFIX_CACHE_BYTES",
    "PREFILL_CHUNK",
    "PrefixCache",
    "ONE_TOKEN",
    "Engine",
    "EngineConfigError",
    "StepWidth",
    "build_engine",
    "check_lossless",
    "in_passing_thread",
    "one_core_here",
    "load_engine",
    "ONE_TOKEN_STEPS",
    "UNKNOWN",
    "CpuFeatures",
    "StepConfig",
    "choose_step_width",
    "choose_weights",
    "WEIGHTS_SETTINGS",
    "wants_fixed_width",
    "sized_steps",
    "cpu_features",
    "pick_device",
    "pick_dtype",
    "verify_in_blocks",
    "OUTPUT_SOURCE",
    "PROMPT_SOURCE",
    "AdaptiveCopyPolicy",
    "Chunk",
    "CopiedRun",
    "CopyPolicy",
    "CostCurve",
    "DecodeResult",
    "Drafter",
    "FixedCopyPolicy",
    "LlmaOptions",
    "Match",
    "ModelLoadError",
    "ModelVerifier",
    "PackedLlama",
    "forward_name",
    "weights_name",
    "attention_name",
    "pack_model",
    "packing_refusal",
    "ReferenceIndex",
    "Scheduler",
    "Sharing",
    "scheduled_greedy",
    "scheduled_llma_stream",
    "NAMED_RULES",
    "RECOMMENDED_REPETITION_RULE",
    "REPETITION_OFF",
    "RepetitionRule",
    "Verifier",
    "best_copy_len",
    "greedy_generate",
    "greedy_stream",
    "llma_generate",
    "llma_steps",
    "llma_stream",
    "load_model",
    "load_or_measure",
    "measure_cost_curve",
    "prepare_bundled_model",
]
