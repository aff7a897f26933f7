"""What a reply cost and where its tokens came from: shown under each reply, stored with it, read by the dashboard."""

from dataclasses import asdict, dataclass, field

from cache.records import ANSWERED, HANDED_OFF, NOT_DECODED
from decoding import REPETITION_OFF, DecodeRecipe, RepetitionRule, StepConfig

from .shown import NOTHING_COVERS


@dataclass(frozen=True)
class ReferenceUse:
    """A similar past answer given to LLMA as a reference, and how many reply tokens were copied from it."""

    id: int
    similarity: float
    copied: int


@dataclass(frozen=True)
class ArticleUse:
    """The help article put into the prompt."""

    id: str
    similarity: float


@dataclass(frozen=True)
class ReplyStats:
    tokens: int
    forward_passes: int
    copied_tokens: int
    seconds: float
    tokens_per_second: float
    greedy_seconds_estimate: float  # measured prefill plus one plain step per further token
    speedup: float  # greedy_seconds_estimate / seconds
    speedup_method: str  # how the greedy time was estimated, in words
    exact_hit: bool
    copied_share: float  # copied_tokens / tokens
    tokens_per_forward_pass: float | None
    references: tuple[ReferenceUse, ...] = ()
    grounding: tuple[ReferenceUse, ...] = ()  # approved answers put into the prompt (also among `references`)
    copied_from_prompt: int = 0
    copied_from_reply: int = 0
    article: ArticleUse | None = None
    history_trimmed: int = 0
    finished: bool = False  # ended by EOS, the stop rule or the token limit, not stopped by the customer
    stop_reason: str = ""  # "eos", "repetition" (cut where it began repeating) or "limit"; "" while running
    # The repetition rule the reply was decoded under (RepetitionRule.to_json()); {} for replies made before it,
    # which were plain greedy. Verify reruns the same rule.
    repetition: dict = field(default_factory=dict)
    max_new_tokens: int = 0  # the budget it was decoded with (0: not recorded)
    # How it was decoded: its engine's DecodeRecipe (decoding/recipe.py), its fields as stored; `recipe()` reads them
    step_width: int | None = None  # every decode forward this wide (None: one-token steps)
    cache_len: int | None = None  # the preallocated KV cache of W-wide steps
    padded_steps: bool = True  # short blocks padded to W (False: unpadded, measured to keep every row's bits)
    forward: str = "transformers"  # "packed" (decoding/packed.py) or transformers' (every reply before it)
    weights: str = "dense"  # the packed forward's weight format: "dense" (the dtype; replies before it), int8, int4, q4
    prefill_weights: str = ""  # the format its prompt was prefilled in; "": the same as `weights` (replies before it)
    attention: str = "sdpa"  # how its decode steps attended: "kernel" (decoding/csrc) or "sdpa" (replies before it)
    prefill_attention: str = "sdpa"  # how its prompt attended: "kernel" or "sdpa" (replies before it)
    lane_head: bool = False  # its head ran on the lane library's bf16 product (False: PyTorch's; replies before it)
    shared_with: float = 0.0  # other replies in each of its decode forwards, on average (0: it decoded alone)
    prefill_chunk: int = 0  # its prompt fed in chunks of this many tokens (StepConfig.prefill_chunk); 0: one forward
    prefill_break: int = 0  # where those chunks broke off its prompt's beginning (StepConfig.prefill_break); 0: none
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens whose keys and values an earlier reply's prefill gave (the prefix cache)
    # What the customer was shown (cache.records.OUTCOMES): the whole reply, the reply cut at its last supported
    # sentence, staff's text, the hand-off message or the decline; and why, when a check decided it.
    outcome: str = ANSWERED
    outcome_reason: str = ""
    sentences: tuple = ()  # every checked sentence: {"end", "overlap", "reason"} (chatbot/support.py)

    def recipe(self) -> DecodeRecipe:
        """How this reply was decoded, from its stored fields alone (those of replies stored before a field existed
        read as they ran: DecodeRecipe.from_json)."""
        return DecodeRecipe.from_json(asdict(self))

    def steps(self) -> StepConfig:
        """The decode step shape this reply ran with, so that a rerun of greedy decoding is bit-comparable."""
        return self.recipe().stored_steps(self.cache_len, self.prefill_break)

    def rule(self) -> RepetitionRule:
        """The decoding rule this reply equals, so that Verify reruns the same one."""
        return RepetitionRule.from_json(self.repetition) if self.repetition else REPETITION_OFF

    @property
    def followed_share(self) -> float:
        """The share of the reply's tokens copied from the approved answers that grounded it."""
        return sum(use.copied for use in self.grounding) / max(self.tokens, 1)

    @property
    def handed_off(self) -> bool:
        """Not decoded: the customer got the hand-off message, the decline or staff's text."""
        return self.stop_reason in NOT_DECODED

    @property
    def hit_limit(self) -> bool:
        """Stopped by the token limit, not by its own end: such a reply is likely cut off mid-thought."""
        return self.stop_reason == "limit"

    @classmethod
    def for_hand_off(cls, seconds: float, outcome: str = HANDED_OFF, reason: str = "") -> "ReplyStats":
        """A reply not decoded (handed off, declined, or staff's text), which took `seconds` to decide that."""
        why = reason or NOTHING_COVERS
        return cls(tokens=0, forward_passes=0, copied_tokens=0, seconds=seconds, tokens_per_second=0.0,
                   greedy_seconds_estimate=0.0, speedup=1.0, exact_hit=False, copied_share=0.0,
                   speedup_method=f"not decoded: {why}", tokens_per_forward_pass=None, finished=True,
                   stop_reason=outcome, outcome=outcome, outcome_reason=reason)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ReplyStats":
        fields = dict(data)
        fields["references"] = tuple(ReferenceUse(**ref) for ref in data.get("references", ()))
        fields["grounding"] = tuple(ReferenceUse(**ref) for ref in data.get("grounding", ()))
        fields["article"] = ArticleUse(**data["article"]) if data.get("article") else None
        fields["sentences"] = tuple(data.get("sentences", ()))
        return cls(**{name: fields[name] for name in cls.__dataclass_fields__ if name in fields})
