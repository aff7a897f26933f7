"""What shapes a chat turn, read once by the app and passed down."""

from dataclasses import dataclass, field, replace

from cache.embedder import DEFAULT_MODEL as DEFAULT_EMBEDDING_MODEL
from cache.embedder import DTYPES as EMBEDDING_DTYPES
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from cache.embedder import model_of
from decoding import RECOMMENDED_REPETITION_RULE, RepetitionRule
from decoding.hardware import native_bf16

from .grounding import GroundingPolicy
from .prompt import DEFAULT_SYSTEM_PROMPT, LAYOUTS
from .relevance import Coverage

# What a first question gets when nothing covers it: no approved answer, no help article, no conversation.
UNCOVERED_CHOICES = ("answer", "hand-off")
# Worded to read right after a greeting or a thank-you too, which have nothing to go on either.
DEFAULT_HANDOFF_MESSAGE = (
    "I can help with the questions our support staff have written answers for, and I have none for this message, "
    "so I won't guess. Please ask your question in other words, or contact our support team."
)

REPLY_CHECKS = ("cut", "record", "off")
# Which review states each grounding setting lets into a prompt.
GROUNDING_REVIEWS = {"approved": ("approved",), "all": ("approved", "candidate"), "off": ()}


@dataclass(frozen=True)
class MatchThresholds:
    """The retrieval thresholds of one embedding model. Cosines of different models live on different scales,
    so each model's are chosen on the tuning half of the shipped question groups (bench/retrieval.py)."""

    grounding_threshold: float
    grounding_margin: float
    grounding_article_margin: float
    article_match_threshold: float
    article_match_margin: float
    lexical_weight: float  # of BM25 in the fused score


# Measured on the held-out half, fresh install (docs/retrieval/report.md and its all-MiniLM-L6-v2 folder):
# mpnet grounds 82% of the rewordings, 94% of them right, none of 17 uncovered wordings, and picks the right help
# article for 85%; MiniLM 72%, 93%, 1 of 17 and 82%. MiniLM keeps the rule tuned before the tuning asked a
# precision's lower bound (which picks one grounding 61% at 93% held out for it: docs/retrieval).
TUNED = {
    "all-MiniLM-L6-v2": MatchThresholds(0.325, 0.075, 0.0, 0.4, 0.05, 0.0),
    "all-mpnet-base-v2": MatchThresholds(0.45, 0.075, 0.01, 0.45, 0.0, 0.1),
}
UNTUNED_MODEL = "all-mpnet-base-v2"  # whose thresholds a model without its own takes (tune: bench/retrieval.py)


@dataclass(frozen=True)
class ChatSettings:
    """Everything that shapes a turn. The defaults are the app's (app.Settings takes them from here), so
    `ChatService.create()` answers as `make run` does. The forward and the step width are the engine's."""

    max_new_tokens: int = 256
    context_window: int = 2048  # prompt + reply tokens, at most the model's own limit
    references_k: int = 4
    similarity_threshold: float = 0.5
    use_knowledge_base: bool = True
    article_threshold: float = 0.35
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_question_chars: int = 4000
    max_entries: int = 10000
    # Grounding: the best eligible past answers go into the system message after the article, so the model
    # answers a rewording the way staff approved, and LLMA can copy it. "approved" (the default) lets only
    # staff-approved answers in; "all" also the model's unreviewed answers, which any customer's question
    # shapes; "off" none. Rejected answers never enter a prompt.
    grounding: str = "approved"
    # The best approved match grounds when its fused score (best-wording cosine + lexical_weight x squashed
    # BM25) reaches grounding_threshold and it beats the runner-up by grounding_margin, or by
    # grounding_article_margin when its article is the chosen one (chatbot/grounding.py). The help article
    # comes from the best approved answer's own article when the question matches that answer by
    # article_match_threshold, article_match_margin ahead of the runner-up (TurnPlanner.pick_article).
    # None: the values tuned for the embedding model (TUNED below).
    grounding_threshold: float | None = None
    grounding_margin: float | None = None
    grounding_article_margin: float | None = None
    article_match_threshold: float | None = None
    article_match_margin: float | None = None
    # The sentence embedding model: all-mpnet-base-v2 (prepared by `make`), the bundled all-MiniLM-L6-v2 (always
    # installed, fast to seed: tests and the speed benchmark), or a folder.
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    # What it computes in: bfloat16 where the CPU multiplies bf16 natively (mpnet embeds a question in 24 ms
    # instead of 60 on one AMD EPYC core), else float32.
    embedding_dtype: str = field(default_factory=lambda: embedding_dtype_for("auto"))
    lexical_weight: float | None = None  # of BM25 in the fused score; None: the embedding model's tuned weight
    match_answers: bool = True  # an approved entry also scores by its answer's cosine where that is higher
    grounding_answers: int = 1
    grounding_token_budget: int = 384  # answer tokens the grounding may add to the prompt
    # Where approved answers sit: as the answer already given to this very question ("answer", copied most),
    # as an earlier exchange ("turn") or in the system message (chatbot/prompt.py).
    prompt_layout: str = "answer"
    # The decoding rule every reply equals (LLMA only makes it faster): greedy with a DRY penalty on repeating
    # the reply itself and a stop when it repeats 16 tokens anyway (decoding/repetition.py, measured there).
    repetition: RepetitionRule = RECOMMENDED_REPETITION_RULE
    # Most replies decoding at once on the packed forward, their W-wide blocks stacked into one forward (each
    # holds a preallocated KV cache); more wait for a slot. transformers' forward decodes one reply at a time.
    max_concurrent_replies: int = 8
    # Prefill every help article's and approved answer's prompt beginning into the prefix cache while the model is
    # idle (chatbot/warm.py).
    warm_prefixes: bool = True
    # A first question with no approved answer, no help article and no conversation: "hand-off" replies
    # `handoff_message` without decoding, "answer" decodes it.
    # The 135M model answers such a question as readily as one it knows, and mostly wrong: "Is my data
    # encrypted?" got "No, your data is not encrypted"; "what's your phone number", "123-Nimbus-D----N-B---".
    # Of the shipped questions, 34 of 42 wordings no approved answer covers are handed off, 3 of 177 covered
    # rewordings (both halves, all-mpnet-base-v2, either dtype: "Handed off" in docs/retrieval/report.md).
    uncovered: str = "hand-off"
    handoff_message: str = DEFAULT_HANDOFF_MESSAGE
    # Does this source answer this question? An article or approved answer goes into the prompt only when its
    # words cover `source_coverage` of the question's distinctive ones (weighted by rarity in the help centre), it
    # names the products the question names and it does the action asked, not its opposite (chatbot/relevance.py).
    # On too: messages that try to change the instructions are declined, and questions that need a sum get the
    # article's figures (staff's text) instead of the model's arithmetic.
    check_sources: bool = True
    source_coverage: float = 0.4
    # ... or this share when retrieval found the source at least `source_close_score` close (a paraphrase).
    source_coverage_close: float = 0.25
    source_close_score: float = 0.55
    # Is this reply supported? Each sentence is checked before it is shown: every number, price, link, menu path
    # and named control in a source, and `sentence_overlap` of its words the sources' words; the first that fails
    # ends the reply there (chatbot/support.py). "record" checks and records but cuts nothing (the evaluation's
    # curve); "off" checks nothing.
    check_replies: str = "cut"
    sentence_overlap: float = 0.6
    sentence_pairs: float = 0.4  # ... and this share of its consecutive content-word pairs

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens < self.context_window:
            raise ValueError("max_new_tokens must be at least 1 and below context_window")
        if not -1.0 <= self.similarity_threshold <= 1.0 or not -1.0 <= self.article_threshold <= 1.0:
            raise ValueError("similarity thresholds are cosine similarities in [-1, 1]")
        if self.max_concurrent_replies < 1:
            raise ValueError("max_concurrent_replies must be at least 1")
        if self.references_k < 1 or self.max_question_chars < 1:
            raise ValueError("references_k and max_question_chars must be at least 1")
        if self.grounding not in GROUNDING_REVIEWS:
            raise ValueError(f"grounding must be one of {', '.join(GROUNDING_REVIEWS)}, not {self.grounding!r}")
        if self.grounding_threshold is not None and not -1.0 <= self.grounding_threshold <= 2.0:
            raise ValueError("grounding_threshold is a fused score in [-1, 2] (a cosine plus at most 1)")
        margins = (self.grounding_margin or 0.0, self.grounding_article_margin or 0.0)
        if not 0.0 <= (self.lexical_weight or 0.0) <= 1.0 or not all(0.0 <= m <= 2.0 for m in margins):
            raise ValueError("lexical_weight must be within [0, 1] and the grounding margins within [0, 2]")
        if self.embedding_dtype not in EMBEDDING_DTYPES:
            raise ValueError(f"embedding_dtype must be one of {', '.join(EMBEDDING_DTYPES)}, not "
                             f"{self.embedding_dtype!r}")
        if self.prompt_layout not in LAYOUTS:
            raise ValueError(f"prompt_layout must be one of {', '.join(LAYOUTS)}, not {self.prompt_layout!r}")
        if self.uncovered not in UNCOVERED_CHOICES:
            raise ValueError(f"uncovered must be one of {', '.join(UNCOVERED_CHOICES)}, not {self.uncovered!r}")
        if self.uncovered == "hand-off" and not self.handoff_message.strip():
            raise ValueError("handoff_message must not be empty when uncovered questions are handed off")
        if self.check_replies not in REPLY_CHECKS:
            raise ValueError(f"check_replies must be one of {', '.join(REPLY_CHECKS)}, not {self.check_replies!r}")
        shares = (self.source_coverage, self.source_coverage_close, self.sentence_overlap, self.sentence_pairs)
        if not all(0.0 <= share <= 1.0 for share in shares):
            raise ValueError("source_coverage, source_coverage_close and sentence_overlap are shares in [0, 1]")
        if self.grounding_answers < 0 or self.grounding_token_budget < 0:
            raise ValueError("grounding_answers and grounding_token_budget must not be negative")

    @classmethod
    def decoding_only(cls, **changes) -> "ChatSettings":
        """The app's settings less what stands between a question and its decoded reply, for the tests and
        benchmarks that measure decoding: every question decoded and shown whole (no hand-off, no checks), no
        warm-up (the prefix cache holds what they put there), the bundled MiniLM in float32 (installed with the
        package, fast to seed, the same vectors on every CPU); `changes` over them."""
        bare = {"embedding_model": EMBEDDING_BUNDLED, "embedding_dtype": "float32", "uncovered": "answer",
                "check_sources": False, "check_replies": "off", "warm_prefixes": False}
        return cls(**(bare | changes))

    @property
    def coverage_needed(self) -> Coverage:
        """How much of a question a source must cover to answer it (chatbot/relevance.py)."""
        return Coverage(self.source_coverage, self.source_coverage_close, self.source_close_score)

    @property
    def grounding_policy(self) -> GroundingPolicy:
        return GroundingPolicy(threshold=self.grounding_threshold, margin=self.grounding_margin,
                               article_margin=self.grounding_article_margin, answers=self.grounding_answers,
                               token_budget=self.grounding_token_budget)

    def for_embedder(self, name: str) -> "ChatSettings":
        """These settings with every threshold left None set to the one tuned for embedding model `name` (in
        either dtype)."""
        tuned = TUNED.get(model_of(name), TUNED[UNTUNED_MODEL])
        unset = {key: value for key, value in vars(tuned).items() if getattr(self, key) is None}
        return replace(self, **unset) if unset else self


def embedding_dtype_for(setting: str) -> str:
    """"auto" is bfloat16 where the CPU multiplies bf16 natively (AVX512-BF16 or AMX: native_bf16), else float32;
    "float32" and "bfloat16" are taken as said."""
    if setting == "auto":
        return "bfloat16" if native_bf16() else "float32"
    return setting
