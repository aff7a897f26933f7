"""How an engine decodes every reply, settled once when the engine is built: one frozen `DecodeRecipe` (pure: no torch).

The forward, its weight formats and attention, the step width, whether short blocks are padded, the prefill chunk
and whether blocks cross key granules all change a reply's last bits, so they are decided together, once, from one
calibration (decoding/engine.py), and everything that names them reads the recipe: the engine line, each reply's
stats (which store its fields), the cost keys, the bench's rows, and staff's Verify, which rebuilds a stored reply's
forward from its recipe alone.
"""

from dataclasses import asdict, dataclass, fields

from .steps import ONE_TOKEN_STEPS, PREFILL_CHUNK, StepConfig, sized_steps

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
    lane_head: bool = False  # the LM head, where it would be dense bf16, runs on the lane library's product instead


TRANSFORMERS = Packing()


def packing_of(forward: object) -> Packing:
    """The packing `forward` was built with, read off the forward itself rather than its type: the packed forward
    carries its own; a transformers model carries none and runs as TRANSFORMERS."""
    return getattr(forward, "packing", TRANSFORMERS)


def crosses_granules(attention: str) -> bool:
    """The granule rule: blocks may cross a key granule only where decode steps attend through the lane kernel, whose
    rows attend over exactly their own keys whatever the key count (StepConfig.cross_granules)."""
    return attention == "kernel"


@dataclass(frozen=True)
class DecodeRecipe:
    """Everything that decides a reply's bits besides the model, its dtype and the decoding rule; frozen."""

    forward: str = "transformers"
    weights: str = "dense"
    prefill_weights: str = "dense"
    attention: str = "sdpa"
    prefill_attention: str = "sdpa"
    lane_head: bool = False
    step_width: int | None = None  # every decode forward this wide; None: one-token steps
    padded_steps: bool = True  # short blocks padded to the width (False where measured needless: StepConfig.padded)
    prefill_chunk: int | None = None  # prompts fed this many tokens a forward; None: in one (transformers' forward)
    cross_granules: bool = False  # blocks may cross a key granule (crosses_granules)

    def __post_init__(self) -> None:
        if self.forward not in FORWARDS or self.attention not in ATTENTIONS:
            raise ValueError(f"not a decode recipe: {self.forward} forward, {self.attention} attention")
        if self.prefill_attention not in PREFILL_ATTENTIONS:
            raise ValueError(f"prefill attention is kernel or sdpa, not {self.prefill_attention!r}")
        if self.step_width is not None and self.step_width < 1:
            raise ValueError(f"a step width is at least 1 (None: one-token steps), not {self.step_width}")
        if self.forward == "packed" and self.step_width is None:
            raise ValueError("the packed forward runs fixed-width steps only")

    @classmethod
    def of(cls, packing: Packing, step_width: int | None, padded_steps: bool = True) -> "DecodeRecipe":
        """The recipe for a forward of `packing` at `step_width`: the packed forward prefills in PREFILL_CHUNK chunks
        (so that prompts beginning alike share them, decoding/prefix_cache.py), and the granule rule follows its
        attention."""
        chunk = PREFILL_CHUNK if packing.forward == "packed" else None
        return cls(**asdict(packing), step_width=step_width, padded_steps=padded_steps, prefill_chunk=chunk,
                   cross_granules=crosses_granules(packing.attention))

    @property
    def packing(self) -> Packing:
        return Packing(self.forward, self.weights, self.prefill_weights, self.attention, self.prefill_attention,
                       self.lane_head)

    def steps(self, prompt_len: int, max_new_tokens: int, beginning: int = 0) -> StepConfig:
        """The shape of every decode forward for this prompt and reply budget (greedy and LLMA alike); the prompt's
        chunks break where its shared `beginning` of that many tokens ends (StepConfig.prefill_break)."""
        return sized_steps(self.step_width, prompt_len, max_new_tokens, self.padded_steps, self.prefill_chunk,
                           cross_granules=self.cross_granules, prefill_break=beginning)

    def stored_steps(self, cache_len: int | None, prefill_break: int = 0) -> StepConfig:
        """The step shape a stored reply ran with, from its KV cache's length and its prompt's prefill break."""
        if not self.step_width:
            return ONE_TOKEN_STEPS
        return StepConfig(self.step_width, cache_len, padded=self.padded_steps, prefill_chunk=self.prefill_chunk,
                          prefill_break=prefill_break if self.prefill_chunk else 0, cross_granules=self.cross_granules)

    def describe(self) -> str:
        """e.g. "packed forward, int4 weights (dense prefill), lane-kernel attention, 8-wide decode steps, short ones
        unpadded": the engine line's middle."""
        steps = f"{self.step_width}-wide decode steps" if self.step_width else "one-token decode steps"
        if self.step_width and not self.padded_steps:
            steps += ", short ones unpadded"
        weights = f", {self.weights} weights" if self.weights != "dense" else ""
        if self.prefill_weights != self.weights:
            weights += f" ({self.prefill_weights} prefill)"
        if self.attention == "kernel":
            weights += ", lane-kernel attention"  # prompts' too, unless prefill_attention says otherwise
        elif self.attention == "batched":
            weights += ", batched attention"  # decode steps' only; prompts attend through SDPA
        if self.lane_head:
            weights += ", lane-library head"
        return f"{self.forward} forward{weights}, {steps}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "DecodeRecipe":
        """The recipe in `data`, a recipe's JSON or a reply's stored stats (other keys ignored), with the values
        replies stored before a field existed ran with: an empty prefill format is the steps' format, a prefill
        chunk of 0 none, and the granule rule follows the attention."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["prefill_weights"] = values.get("prefill_weights") or values.get("weights", "dense")
        values["prefill_chunk"] = values.get("prefill_chunk") or None
        values["step_width"] = values.get("step_width") or None
        values.setdefault("cross_granules", crosses_granules(values.get("attention", "sdpa")))
        return cls(**values)
