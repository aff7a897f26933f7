"""One chat turn: embed the question, fetch similar past answers, decode with LLMA, store the answer."""

import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from cache import AnswerCache, Embedder, NewAnswer, NewReply
from cache.records import ArticleRecord, CachedAnswer, Hit
from data import StaffAnswer, load_articles, load_staff_answers
from decoding import (
    ONE_TOKEN_STEPS,
    OUTPUT_SOURCE,
    PROMPT_SOURCE,
    AdaptiveCopyPolicy,
    CopyPolicy,
    CostCurve,
    DecodeResult,
    FixedCopyPolicy,
    LlmaOptions,
    PackedLlama,
    StepConfig,
    forward_name,
    greedy_generate,
    llma_stream,
    load_model,
    load_or_measure,
    pack_model,
    resolve_step_width,
    sized_steps,
)

from .prompt import (
    DEFAULT_SYSTEM_PROMPT,
    ApprovedAnswer,
    InputError,
    Prompt,
    Turn,
    answer_token_ids,
    build_prompt,
    clean_text,
    context_key,
    parse_history,
    prompt_hash,
)
from .stats import ArticleUse, ReferenceUse, ReplyStats

COST_CURVES_FILE = "cost_curves.json"  # in the data folder: measured forward costs and the chosen step width
# Which review states each grounding setting lets into a prompt.
GROUNDING_REVIEWS = {"approved": ("approved",), "all": ("approved", "candidate"), "off": ()}


@dataclass(frozen=True)
class ChatSettings:
    """Everything that shapes a turn; read once by the app and passed down."""

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
    grounding_threshold: float = 0.6
    grounding_answers: int = 1
    grounding_token_budget: int = 384  # answer tokens the grounding may add to the prompt
    # Every decode forward W tokens wide (decoding/steps.py): the price of LLMA equalling this engine's greedy
    # bit for bit in bfloat16, and nearly free on the packed forward's flat cost curve. None: one-token steps
    # (transformers' forward in fp32, where a W-wide step costs about twice a one-token one).
    step_width: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens < self.context_window:
            raise ValueError("max_new_tokens must be at least 1 and below context_window")
        if not -1.0 <= self.similarity_threshold <= 1.0 or not -1.0 <= self.article_threshold <= 1.0:
            raise ValueError("similarity thresholds are cosine similarities in [-1, 1]")
        if self.references_k < 1 or self.max_question_chars < 1:
            raise ValueError("references_k and max_question_chars must be at least 1")
        if self.grounding not in GROUNDING_REVIEWS:
            raise ValueError(f"grounding must be one of {', '.join(GROUNDING_REVIEWS)}, not {self.grounding!r}")
        if not -1.0 <= self.grounding_threshold <= 1.0:
            raise ValueError("grounding_threshold is a cosine similarity in [-1, 1]")
        if self.grounding_answers < 0 or self.grounding_token_budget < 0:
            raise ValueError("grounding_answers and grounding_token_budget must not be negative")


@dataclass(frozen=True)
class Span:
    """Characters of the reply text that were copied from a reference (for highlighting)."""

    start: int
    end: int
    source: str  # "cache:<entry id>", "prompt" or "reply"


@dataclass(frozen=True)
class Reply:
    """A reply, partial while streaming (`done` False) and final at the end."""

    text: str
    stats: ReplyStats
    done: bool = False
    id: int | None = None  # the stored reply's id, once done
    spans: list[Span] = field(default_factory=list)
    notice: str = ""  # something the user should know, e.g. that old turns were left out


@dataclass(frozen=True)
class ReplyReferences:
    """What a reply drew on, as stored now: its reference entries by id (None once deleted) and its article."""

    entries: dict[int, CachedAnswer | None]
    article: ArticleRecord | None


@dataclass(frozen=True)
class Verification:
    reply_id: int
    identical: bool
    greedy_seconds: float
    reply_seconds: float
    measured_speedup: float


@dataclass(frozen=True)
class _Turn:
    """What the steps of one turn share."""

    question: str
    history: list[Turn]
    prompt: Prompt
    article_id: str | None
    article_score: float | None
    grounding: list[Hit]  # approved answers put into the prompt; also the first references
    hits: list[Hit]  # every reference: the grounding first, then similar past answers
    context_key: str
    prompt_hash: str
    session_id: str
    steps: StepConfig  # the shape of every decode forward; Verify reruns greedy with the same


def within_token_budget(candidates: list[Hit], budget: int) -> list[Hit]:
    """The candidates, best first, whose answers fit together in `budget` tokens (one too long is skipped)."""
    chosen = []
    for hit in candidates:
        if len(hit.answer_ids) <= budget:
            chosen.append(hit)
            budget -= len(hit.answer_ids)
    return chosen


@dataclass(frozen=True)
class Seed:
    """What a fresh install starts with: help articles (id -> "Title\nbody") and approved staff answers."""

    articles: dict[str, str] = field(default_factory=dict)
    answers: list[StaffAnswer] = field(default_factory=list)

    @classmethod
    def shipped(cls) -> "Seed":
        return cls(load_articles(), load_staff_answers())


def seed_help_centre(cache: AnswerCache, tokenizer, model_id: str, seed: Seed) -> None:
    """Store the seed's articles, and its answers as approved entries that can guide replies at once."""
    for article_id, text in seed.articles.items():
        title, _, body = text.partition("\n")
        cache.upsert_article(article_id, title.strip(), body.strip())
    for staff in seed.answers:
        cache.add_answer(
            NewAnswer(
                question=staff.question, answer=staff.answer, answer_ids=answer_token_ids(tokenizer, staff.answer),
                model_id=model_id, article_ids=[staff.article], review="approved",
            )
        )


class ChatService:
    def __init__(self, model, tokenizer, cache: AnswerCache, settings: ChatSettings, cost: CostCurve, model_id: str):
        self.model, self.tokenizer, self.cache, self.settings = model, tokenizer, cache, settings
        self.cost, self.model_id = cost, model_id
        self.policy = AdaptiveCopyPolicy(cost=cost)
        self.eos_token_id = tokenizer.eos_token_id
        self._model_lock = threading.Lock()  # one forward at a time: 2 cores gain nothing from more
        limit = getattr(model.config, "max_position_embeddings", settings.context_window)
        self.context_window = min(settings.context_window, limit)

    @classmethod
    def create(
        cls,
        data_dir: str | Path = "var",
        model_path: str | Path | None = None,
        db_url: str | None = None,
        threads: int | None = None,
        settings: ChatSettings | None = None,
        seed: Seed | None = None,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        step_width: int | None = None,
    ) -> "ChatService":
        """Load the model (the bundled one by default), pack it where the architecture allows, then open the
        service on it. `step_width` None picks the default for the forward that runs (0: one-token steps)."""
        model, tokenizer = load_model(model_path, threads=threads, dtype=dtype, device=device)
        model = pack_model(model)
        width = resolve_step_width(step_width, model, Path(data_dir) / COST_CURVES_FILE)
        settings = replace(settings or ChatSettings(), step_width=width)
        model_id = str(model_path or "SmolLM2-135M-Instruct")
        return cls.open(model, tokenizer, model_id, data_dir, db_url, settings, seed)

    @classmethod
    def open(
        cls,
        model,
        tokenizer,
        model_id: str,
        data_dir: str | Path = "var",
        db_url: str | None = None,
        settings: ChatSettings | None = None,
        seed: Seed | None = None,
        cost: CostCurve | None = None,
    ) -> "ChatService":
        """Open embedder and cache around a loaded model; seed the help centre on first start (the shipped
        articles and staff-written approved answers unless `seed` says otherwise)."""
        settings = settings or ChatSettings()
        data_dir = Path(data_dir)
        embedder = Embedder.load()
        cache = AnswerCache.open(
            data_dir, embed=embedder.embed, dim=embedder.dim, url=db_url, max_entries=settings.max_entries,
            embedder_name=embedder.name,
        )
        seed = seed if seed is not None else Seed.shipped()
        cache.seed_if_new(lambda: seed_help_centre(cache, tokenizer, model_id, seed))
        # The curve is measured on the step shape the turns run (its cache sized for a typical prompt).
        typical_steps = sized_steps(settings.step_width, 256, settings.max_new_tokens)
        cost = cost or load_or_measure(model, data_dir / COST_CURVES_FILE, steps=typical_steps)
        return cls(model, tokenizer, cache, settings, cost, model_id)

    @property
    def forward_name(self) -> str:
        """Which forward decodes: "packed" (decoding/packed.py) or "transformers"."""
        return forward_name(self.model)

    # --- one turn --------------------------------------------------------------------------------

    def ask(self, question: str, history: list[dict] | None = None, session_id: str = "") -> Reply:
        *_, final = self.stream(question, history, session_id)
        return final

    def stream(self, question: str, history: list[dict] | None = None, session_id: str = "") -> Iterator[Reply]:
        """Replies growing chunk by chunk; the last one is `done` and stored."""
        turn = self._prepare(question, history, session_id)
        exact = self.cache.find_exact(turn.question, turn.context_key, self.model_id, turn.prompt_hash)
        if exact is None:
            yield from self._decode(turn, self.policy, exact_hit=False)
            return
        # An exact repeat is still checked by the model: the stored answer is drafted whole and verified in
        # one forward pass. That costs a prefill and one pass, and keeps the promise even after staff edited
        # or imported the entry: a changed answer is simply rejected where it departs from the model's own.
        hit = Hit(exact.id, exact.question, exact.answer, exact.answer_ids, 1.0)
        whole = FixedCopyPolicy(match_len=1, copy_len=self.settings.max_new_tokens)
        yield from self._decode(replace(turn, hits=[hit]), whole, exact_hit=True)

    def _prepare(self, question: str, history: list[dict] | None, session_id: str) -> _Turn:
        question = self._check_question(question)
        turns = parse_history(history, self.settings.max_question_chars * 4)
        article_id, article_text, article_score = self._pick_article(question)
        grounding = self._pick_grounding(question)
        prompt = build_prompt(
            self.tokenizer, self.settings.system_prompt, article_text, turns, question,
            self.context_window - self.settings.max_new_tokens,
            approved=[ApprovedAnswer(hit.question, hit.answer) for hit in grounding],
        )
        kept = turns[prompt.dropped_turns :]
        similar = self.cache.lookup(
            question, k=self.settings.references_k, threshold=self.settings.similarity_threshold,
            model_id=self.model_id,
        )
        grounded_ids = {hit.id for hit in grounding}
        # The prompt's token ids hold the article and the grounding text, so an edited or newly approved
        # answer changes the hash and can never be served from a stale exact hit.
        decode_settings = {
            "max_new_tokens": self.settings.max_new_tokens, "model": self.model_id,
            "grounding": [[hit.id, hit.answer] for hit in grounding],
        }
        return _Turn(
            question=question, history=kept, prompt=prompt, article_id=article_id, article_score=article_score,
            grounding=grounding, hits=[*grounding, *(hit for hit in similar if hit.id not in grounded_ids)],
            context_key=context_key(kept),
            prompt_hash=prompt_hash(str(prompt.ids), [article_id or ""], decode_settings),
            session_id=session_id,
            steps=sized_steps(self.settings.step_width, len(prompt.ids), self.settings.max_new_tokens),
        )

    def _pick_grounding(self, question: str) -> list[Hit]:
        """The most similar answers whose review state the grounding setting allows, within the token budget."""
        reviews = GROUNDING_REVIEWS[self.settings.grounding]
        if not reviews or self.settings.grounding_answers == 0:
            return []
        candidates = self.cache.lookup(
            question, k=self.settings.grounding_answers, threshold=self.settings.grounding_threshold,
            model_id=self.model_id, reviews=reviews,
        )
        return within_token_budget(candidates, self.settings.grounding_token_budget)

    def _check_question(self, question: object) -> str:
        if not isinstance(question, str):
            raise InputError("The message must be text.")
        # Runs of spaces are collapsed before the model sees the text, so that a repeat typed with
        # other spacing is the identical prompt (an exact hit) and still the model's own answer.
        question = "\n".join(" ".join(line.split()) for line in clean_text(question).strip().splitlines())
        if not question:
            raise InputError("Please type a question.")
        if len(question) > self.settings.max_question_chars:
            raise InputError(
                f"Your message has {len(question):,} characters; the limit is "
                f"{self.settings.max_question_chars:,}. Please shorten it."
            )
        return question

    def _pick_article(self, question: str) -> tuple[str | None, str | None, float | None]:
        if not self.settings.use_knowledge_base:
            return None, None, None
        hit = self.cache.best_article(question, threshold=self.settings.article_threshold)
        if hit is None:
            return None, None, None
        return hit.id, f"{hit.title}\n\n{hit.body}", hit.score

    def _decode(self, turn: _Turn, policy: CopyPolicy, exact_hit: bool) -> Iterator[Reply]:
        references = [hit.answer_ids for hit in turn.hits]
        result = DecodeResult()
        options = LlmaOptions(self.settings.max_new_tokens, self.eos_token_id)
        stream = llma_stream(self.model, turn.prompt.ids, references, policy, options, result, steps=turn.steps)
        plain_steps: list[float] = []  # steps with no draft timed in this very decode: greedy's step time
        last = time.perf_counter()
        while True:
            with self._model_lock:
                chunk = next(stream, None)
            now = time.perf_counter()
            if chunk is None:
                break
            if chunk.drafted == 0 and len(result.tokens) > 1:
                plain_steps.append(now - last)
            last = now
            yield Reply(text=self._text(result.tokens), stats=self._stats(turn, result, plain_steps, exact_hit))
        yield self._finish(turn, result, plain_steps, exact_hit)

    def _finish(self, turn: _Turn, result: DecodeResult, plain_steps: list[float], exact_hit: bool) -> Reply:
        """Store the complete answer and the served reply; return the final Reply."""
        text = self._text(result.tokens)
        stats = self._stats(turn, result, plain_steps, exact_hit)
        entry_id = self.cache.add_answer(
            NewAnswer(
                question=turn.question, answer=text, answer_ids=list(result.tokens), model_id=self.model_id,
                context=_context_text(turn.history), context_key=turn.context_key, prompt_hash=turn.prompt_hash,
                article_ids=[turn.article_id] if turn.article_id else [], stats=stats.to_json(),
                speedup=stats.speedup,
            )
        )
        used = {self._hit_for_source(turn, run.source) for run in result.copied_runs} - {None}
        self.cache.mark_used(used)
        reply_id = self._record(turn, entry_id, text, stats, result.tokens, exact_hit)
        return Reply(
            text=text, stats=stats, done=True, id=reply_id, spans=self._spans(turn, result), notice=_notice(turn)
        )

    def _record(
        self, turn: _Turn, entry_id: int, text: str, stats: ReplyStats, tokens: list[int], exact_hit: bool
    ) -> int:
        return self.cache.record_reply(
            NewReply(
                question=turn.question, answer=text, entry_id=entry_id,
                history=[{"role": t.role, "content": t.content} for t in turn.history], stats=stats.to_json(),
                speedup=stats.speedup, seconds=stats.seconds, greedy_seconds=stats.greedy_seconds_estimate,
                # The prompt and reply token ids are kept so that `verify` can rerun exactly this decode.
                prompt_ids=turn.prompt.ids, token_ids=list(tokens),
                reference_entry_ids=[h.id for h in turn.hits], exact_hit=exact_hit, session_id=turn.session_id,
            )
        )

    # --- stats -----------------------------------------------------------------------------------

    def _stats(self, turn: _Turn, result: DecodeResult, plain_steps: list[float], exact_hit: bool) -> ReplyStats:
        n = len(result.tokens)
        step, method = self._step_seconds(plain_steps)
        method = f"exact repeat verified in one pass; {method}" if exact_hit else method
        greedy_estimate = result.prefill_seconds + max(n - 1, 0) * step
        seconds = max(result.seconds, 1e-6)
        copied_by_source: dict[int, int] = {}
        for run in result.copied_runs:
            copied_by_source[run.source] = copied_by_source.get(run.source, 0) + run.length
        return ReplyStats(
            tokens=n, forward_passes=result.forward_passes, copied_tokens=result.copied_tokens,
            seconds=round(result.seconds, 4), tokens_per_second=round(n / seconds, 1),
            greedy_seconds_estimate=round(greedy_estimate, 4), speedup=round(greedy_estimate / seconds, 2),
            speedup_method=f"estimate: measured prefill + {max(n - 1, 0)} greedy steps x "
            f"{step * 1000:.0f} ms ({method})",
            exact_hit=exact_hit, copied_share=round(result.copied_tokens / n, 3) if n else 0.0,
            tokens_per_forward_pass=round(n / result.forward_passes, 2) if result.forward_passes else None,
            references=tuple(
                ReferenceUse(h.id, round(h.score, 3), copied_by_source.get(i, 0)) for i, h in enumerate(turn.hits)
            ),
            grounding=tuple(
                ReferenceUse(h.id, round(h.score, 3), copied_by_source.get(i, 0))
                for i, h in enumerate(turn.hits) if h.id in {g.id for g in turn.grounding}
            ),
            copied_from_prompt=copied_by_source.get(PROMPT_SOURCE, 0),
            copied_from_reply=copied_by_source.get(OUTPUT_SOURCE, 0),
            article=self._article_use(turn), history_trimmed=turn.prompt.dropped_turns,
            finished=result.finished_by_eos or n >= self.settings.max_new_tokens,
            step_width=turn.steps.width, cache_len=turn.steps.cache_len if turn.steps.width else None,
            forward=self.forward_name,
        )

    def _step_seconds(self, plain_steps: list[float]) -> tuple[float, str]:
        """Greedy's step time (one token, or W wide): from this decode's own plain steps when there are enough."""
        if len(plain_steps) >= 3:
            return statistics.median(plain_steps), f"median of {len(plain_steps)} plain steps in this decode"
        return self.cost.cost(1), "greedy step calibrated at start-up"

    def _article_use(self, turn: _Turn) -> ArticleUse | None:
        if turn.article_id is None:
            return None
        return ArticleUse(turn.article_id, round(turn.article_score or 0.0, 3))

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _spans(self, turn: _Turn, result: DecodeResult) -> list[Span]:
        spans = []
        for run in result.copied_runs:
            start = len(self._text(result.tokens[: run.out_start]))
            end = len(self._text(result.tokens[: run.out_start + run.length]))
            hit = self._hit_for_source(turn, run.source)
            label = f"cache:{hit}" if hit is not None else ("reply" if run.source == OUTPUT_SOURCE else "prompt")
            if end > start:
                spans.append(Span(start, end, label))
        return spans

    @staticmethod
    def _hit_for_source(turn: _Turn, source: int) -> int | None:
        return turn.hits[source].id if 0 <= source < len(turn.hits) else None

    def references(self, reply: Reply) -> ReplyReferences:
        """The cached answers and the help article a reply was decoded with, for showing beside it."""
        entries = {ref.id: self.cache.get_entry(ref.id) for ref in reply.stats.references}
        article = self.cache.get_article(reply.stats.article.id) if reply.stats.article else None
        return ReplyReferences(entries, article)

    # --- staff tools -----------------------------------------------------------------------------

    def verify(self, reply_id: int) -> Verification:
        """Rerun the stored reply's prompt with plain greedy decoding; compare tokens and times."""
        reply = self.cache.get_reply(reply_id)
        if reply is None:
            raise KeyError(f"no reply {reply_id}")
        prompt_ids, tokens = reply.prompt_ids, reply.token_ids
        if not prompt_ids or tokens is None:
            raise ValueError(f"reply {reply_id} was stored without its prompt; it cannot be verified")
        stats = ReplyStats.from_json(reply.stats) if reply.stats else None
        steps = stats.steps() if stats else ONE_TOKEN_STEPS
        with self._model_lock:
            greedy = greedy_generate(self._model_for(stats), prompt_ids, len(tokens) or 1, self.eos_token_id,
                                     steps=steps)
        identical = greedy.tokens == tokens
        reply_seconds = max(reply.seconds or 0.0, 1e-6)
        speedup = greedy.seconds / reply_seconds
        self.cache.set_verification(reply_id, identical, speedup)
        return Verification(reply_id, identical, greedy.seconds, reply_seconds, speedup)

    def _model_for(self, stats: ReplyStats | None):
        """The forward a stored reply was decoded on: transformers' for replies from before the packed one."""
        transformers = stats is None or stats.forward == "transformers"
        return self.model.source if transformers and isinstance(self.model, PackedLlama) else self.model

    def feedback(self, reply_id: int, value: int, reason: str = "") -> None:
        """Thumbs up (+1) or down (-1) with an optional reason; 0 takes the rating back."""
        if value not in (-1, 0, 1):
            raise InputError("feedback must be +1, -1 or 0")
        self.cache.set_feedback(reply_id, value, clean_text(reason)[:2000])

    def with_settings(self, **changes) -> "ChatService":
        """A service sharing model and cache but with other settings (for tests and the benchmark)."""
        return ChatService(self.model, self.tokenizer, self.cache, replace(self.settings, **changes), self.cost,
                           self.model_id)


def _context_text(history: list[Turn]) -> str:
    return "\n".join(f"{t.role}: {t.content}" for t in history)


def _notice(turn: _Turn) -> str:
    if turn.prompt.dropped_turns:
        return (f"The conversation is longer than the model can read: the {turn.prompt.dropped_turns} oldest "
                "messages were left out of this answer.")
    return ""
