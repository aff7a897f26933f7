"""How a forward holds its weights and attends: its `Packing` (pure: no torch), read off the forward, not its type.

The weight formats and the attention change a reply's last bits, so the packed forward keeps the packing it was built
with, and everything that names them (the engine line, each reply's stats, the cost keys) reads it there.
"""

from dataclasses import dataclass

FORWARDS = ("packed", "transformers")
ATTENTIONS = ("kernel", "batched", "sdpa")  # the lane kernel, one SDPA call for every lane (CUDA), SDPA lane by lane
PREFILL_ATTENTIONS = ("kernel", "sdpa")


@dataclass(frozen=True)
class Packing:
    """How a forward holds its weights and attends: the part of a recipe the forward is built from.

    The packed forward keeps the one it was built with (PackedLlama.packing); transformers' forward is TRANSFORMERS.
    """

    forward: str = "transformers"  # "packed" (decoding/packed.py) or "transformers" (the model's own forward)
    weights: str = "dense"  # the decode steps' format: "dense" (the model's dtype), "int8", "int4" or "q4"
    prefill_weights: str = "dense"  # the prompts' format
    attention: str = "sdpa"  # how decode steps attend: one of ATTENTIONS
    prefill_attention: str = "sdpa"  # how prompts attend: one of PREFILL_ATTENTIONS


TRANSFORMERS = Packing()


def packing_of(forward: object) -> Packing:
    """The packing `forward` was built with, read off the forward itself rather than its type: the packed forward
    carries its own; a transformers model carries none and runs as TRANSFORMERS."""
    return getattr(forward, "packing", TRANSFORMERS)
