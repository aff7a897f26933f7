"""One chat turn: embed the question, fetch similar past answers, decode with LLMA, store the answer."""

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import asdict, replace
from pathlib import Path

import torch

from cache import AnswerCache, NewAnswer, NewReply
from cache.records import ANSWERED, CUT, HANDED_OFF, NOT_DECODED, Hit
from decoding import (
    AUTO,
    DEFAULT_PREFIX_CACHE_BYTES,
    ONE_TOKEN_STEPS,
    REPETITION_OFF,
    AdaptiveCopyPolicy,
    Chunk,
    CopyPolicy,
    CostCurve,
    DecodeRecipe,
    DecodeResult,
    Engine,
    FixedCopyPolicy,
    LlmaOptions,
    RepetitionRule,
    Scheduler,
    Sharing,
    StepConfig,
    StepWidth,
    build_engine,
    greedy_generate,
    llma_stream,
    load_model,
    load_or_measure,
    scheduled_greedy,
    scheduled_llma_stream,
)
from decoding.engine import DEFAULT_MODEL_ID

from .deployment import COST_CURVES_FILE, open_cache, open_scheduler, shared_weights_chooser, shared_width_chooser
from .measure import ReplyMeter, StepTimer, copied_spans, used_entries
from .prompt import InputError, clean_text
from .replies import Reply, ReplyReferences, Verification
from .seed import Seed, seed_help_centre
from .settings import ChatSettings
from .shown import shown_after_check, shown_undecoded
from .stats import ReplyStats
from .support import ReplyCheck, Sources
from .turn import ChatTurn, TurnPlanner, Unanswered
from .warm import WARM_SHARE, prompt_beginnings


class ChatService:
    def __init__(
        self, engine: Engine, cache: AnswerCache, settings: ChatSettings, cost: CostCurve,
        scheduler: Scheduler | None = None,
    ) -> None:
        settings = settings.for_embedder(cache.embedder_name)  # thresholds left None: the model's tuned ones
        self.engine, self.cache, self.settings, self.cost = engine, cache, settings, cost
        self.tokenizer, self.model_id = engine.tokenizer, engine.model_id
        self.policy = AdaptiveCopyPolicy(cost=cost)
        # The decoding rule every reply equals; its end bonus and grounded numbers need the tokenizer's tokens.
        self.rule = settings.repetition.for_tokenizer(engine.tokenizer.eos_token_id, engine.tokenizer)
        # The packed forward is owned by a scheduler: concurrent turns (and staff's Verify) share its forwards.
        # transformers' forward takes turns under the lock, a forward at a time.
        self.scheduler = scheduler or open_scheduler(engine, settings.max_concurrent_replies)
        self._model_lock = threading.Lock()
        self._repacked: dict = {}  # the forwards older replies were decoded on, by their packing (_model_for)
        limit = getattr(engine.model.config, "max_position_embeddings", settings.context_window)
        self.context_window = min(settings.context_window, limit)
        self.planner = TurnPlanner(cache, engine, settings, self.context_window)
        self.meter = ReplyMeter(engine, cost, self.rule, settings.max_new_tokens)
        self.warm_queued = 0  # prompt beginnings queued for the prefix cache (warm_prefix_cache)

    @classmethod
    def create(
        cls,
        data_dir: str | Path = "var",
        model_path: str | Path | None = None,
        db_url: str | None = None,
        settings: ChatSettings | None = None,
        seed: Seed | None = None,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        step_width: StepWidth = AUTO,
        weights: str = "dense",
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> "ChatService":
        """Load the model (the bundled one by default) as an engine and open the service on it. An "auto" step
        width or weight format is the one the deployment's database holds, measured here only by the first
        replica to start."""
        settings = settings or ChatSettings()
        model, tokenizer = load_model(model_path, dtype=dtype, device=device)  # a bad path fails before the rest
        cache = open_cache(data_dir, db_url, settings.max_entries, settings.embedding_model,
                           settings.embedding_dtype)
        model_id = str(model_path or DEFAULT_MODEL_ID)
        cost_file = Path(data_dir) / COST_CURVES_FILE
        engine = build_engine(
            model, tokenizer, model_id, step_width, shared_width_chooser(cache, cost_file, model_id),
            weights, shared_weights_chooser(cache, cost_file, model_id), prefix_cache_bytes,
        )
        return cls.start(engine, cache, data_dir, settings, seed)

    @classmethod
    def open(
        cls,
        engine: Engine,
        data_dir: str | Path = "var",
        db_url: str | None = None,
        settings: ChatSettings | None = None,
        seed: Seed | None = None,
        cost: CostCurve | None = None,
    ) -> "ChatService":
        """Open embedder and cache in `data_dir` (or at `db_url`) around a ready engine."""
        settings = settings or ChatSettings()
        cache = open_cache(data_dir, db_url, settings.max_entries, settings.embedding_model,
                           settings.embedding_dtype)
        return cls.start(engine, cache, data_dir, settings, seed, cost)

    @classmethod
    def start(
        cls, engine: Engine, cache: AnswerCache, data_dir: str | Path, settings: ChatSettings,
        seed: Seed | None = None, cost: CostCurve | None = None,
    ) -> "ChatService":
        """Seed the help centre on first start (the shipped articles and staff-written approved answers unless
        `seed` says otherwise) and measure the cost curve on the step shape the turns run."""
        seed = seed if seed is not None else Seed.shipped()
        cache.seed_if_new(lambda: seed_help_centre(cache, engine.tokenizer, engine.model_id, seed))
        typical_steps = engine.steps(256, settings.max_new_tokens)  # its cache sized for a typical prompt
        cost = cost or load_or_measure(engine.model, Path(data_dir) / COST_CURVES_FILE, steps=typical_steps)
        service = cls(engine, cache, settings, cost)
        cache.warm_match(service.settings.match_answers, service.settings.lexical_weight > 0)  # the model's tuned
        if settings.warm_prefixes:
            service.warm_prefix_cache()
            threading.Thread(target=service.planner.words.warm, name="warm-sentences", daemon=True).start()
        return service

    def warm_prefix_cache(self) -> int:
        """Queue the help centre's prompt beginnings for prefilling while the model is idle (chatbot/warm.py), within
        WARM_SHARE of the prefix cache; how many were queued."""
        if self.scheduler is None or self.scheduler.model.prefixes.max_bytes == 0:
            return 0
        model = self.scheduler.model
        budget = int(WARM_SHARE * model.prefixes.max_bytes) // model.kv_bytes_per_token
        beginnings = prompt_beginnings(self.cache, self.tokenizer, self.model_id, self.settings, budget,
                                       self.engine.prefill_chunk or 1)
        self.scheduler.warm(beginnings, lambda n: self.engine.steps(n, self.settings.max_new_tokens, beginning=n))
        self.warm_queued = len(beginnings)
        return len(beginnings)

    @property
    def forward_name(self) -> str:
        """Which forward decodes: "packed" (decoding/packed.py) or "transformers"."""
        return self.engine.forward

    @property
    def turns_at_once(self) -> int:
        """How many chat turns decode at the same time: the scheduler's slots, or 1 where turns take turns."""
        return self.scheduler.max_slots if self.scheduler is not None else 1

    def describe(self) -> str:
        """The engine line, and how concurrent replies are served."""
        if self.scheduler is None:
            return f"{self.engine.describe()}; one reply at a time ({self.forward_name} forward)"
        if self.settings.max_concurrent_replies == 1:
            return f"{self.engine.describe()}; one reply at a time (as set)"
        if self.scheduler.max_slots == 1:
            return f"{self.engine.describe()}; one reply per forward (this CPU's rows change bits in company)"
        padded = ", short blocks padded in company" if self.scheduler.pad_to else ""
        return f"{self.engine.describe()}; up to {self.scheduler.max_slots} replies share each forward{padded}"

    # --- one turn --------------------------------------------------------------------------------

    def ask(self, question: str, history: list[dict] | None = None, session_id: str = "") -> Reply:
        *_, final = self.stream(question, history, session_id)
        return final

    def stream(self, question: str, history: list[dict] | None = None, session_id: str = "") -> Iterator[Reply]:
        """Replies growing chunk by chunk; the last one is `done` and stored."""
        start = time.perf_counter()
        turn = self.planner.plan(question, history, session_id)
        if isinstance(turn, ChatTurn) and turn.uncovered and self.settings.uncovered == "hand-off":
            turn = Unanswered(turn.question, turn.session_id, HANDED_OFF, turn.why_uncovered())
        if isinstance(turn, Unanswered):
            yield self._not_decoded(turn, time.perf_counter() - start)
            return
        exact = self.cache.find_exact(turn.question, turn.context_key, self.model_id, turn.prompt_hash)
        if exact is None:
            yield from self._decode(turn, self.policy, exact_hit=False)
            return
        # An exact repeat is still checked by the model: the stored answer is drafted whole and verified (in one
        # forward, or one W-wide forward per W tokens). That costs a prefill and those forwards, and keeps the
        # promise even after staff edited or imported the entry: a changed answer is simply rejected where it
        # departs from the model's own.
        hit = Hit(exact.id, exact.question, exact.answer, exact.answer_ids, 1.0)
        whole = FixedCopyPolicy(match_len=1, copy_len=self.settings.max_new_tokens)
        yield from self._decode(replace(turn, references=[hit]), whole, exact_hit=True)

    def _decode(self, turn: ChatTurn, policy: CopyPolicy, exact_hit: bool) -> Iterator[Reply]:
        references = [hit.answer_ids for hit in turn.references]
        result, sharing, timer = DecodeResult(), Sharing(), StepTimer()
        options = LlmaOptions(self.settings.max_new_tokens, self.tokenizer.eos_token_id, repetition=self.rule)
        check = self._reply_check(turn)
        with closing(self._chunks(turn, references, policy, options, result, sharing)) as chunks:
            for chunk in chunks:
                timer.lap(chunk.drafted, len(result.tokens))
                text = self._text(result.tokens)
                shown = text[: check.feed(text, final=False)]
                if check.cut:  # the rest would not be shown: stop decoding, free the slot
                    break
                stats = self.meter.stats(turn, result, timer, exact_hit, sharing)
                yield Reply(text=shown.rstrip(), stats=stats, model_text=shown.rstrip())
        if not check.cut:
            check.feed(self._text(result.tokens), final=True)
        yield self._finish(turn, result, timer, exact_hit, sharing, check)

    def _reply_check(self, turn: ChatTurn) -> ReplyCheck:
        """The sentence check of this turn's reply, against the texts in its prompt (chatbot/support.py)."""
        mode = self.settings.check_replies
        sources = Sources(turn.sources, echo=f"{turn.asked}\n{turn.question}")
        if mode == "off":
            return ReplyCheck(sources, 0.0, enforce=False)
        return ReplyCheck(sources, self.settings.sentence_overlap, mode == "cut", self.settings.sentence_pairs)

    def _chunks(
        self, turn: ChatTurn, references: Sequence[Sequence[int]], policy: CopyPolicy, options: LlmaOptions,
        result: DecodeResult, sharing: Sharing,
    ) -> Iterator[Chunk]:
        """The reply's verified chunks: through the scheduler's shared forwards, or a forward at a time."""
        if self.scheduler is not None:
            yield from scheduled_llma_stream(self.scheduler, turn.prompt.ids, references, policy, options,
                                             turn.steps, result, sharing)
            return
        stream = llma_stream(self.engine.model, turn.prompt.ids, references, policy, options, result,
                             steps=turn.steps)
        while True:
            with self._model_lock:
                chunk = next(stream, None)
            if chunk is None:
                return
            yield chunk

    def _finish(
        self, turn: ChatTurn, result: DecodeResult, timer: StepTimer, exact_hit: bool, sharing: Sharing,
        check: ReplyCheck,
    ) -> Reply:
        """Store the answer and the served reply; return the final Reply: the whole reply, or its prefix up to the
        last supported sentence followed by staff's text, or staff's text alone, or the hand-off."""
        text = self._text(result.tokens)
        shown = shown_after_check(text, check, turn.passage, self.settings.handoff_message)
        stats = replace(self.meter.stats(turn, result, timer, exact_hit, sharing), outcome=shown.outcome,
                        outcome_reason=shown.reason, sentences=tuple(asdict(sentence) for sentence in check.checked))
        entry_id = self.cache.add_answer(
            NewAnswer(
                question=turn.question, answer=text, answer_ids=list(result.tokens), model_id=self.model_id,
                context=turn.context_text(), context_key=turn.context_key, prompt_hash=turn.prompt_hash,
                article_ids=[turn.article_id] if turn.article_id else [], stats=stats.to_json(),
                speedup=stats.speedup,
            )
        )
        self.cache.mark_used(used_entries(turn, result))
        if not exact_hit:
            self._suggest_wordings(turn)
        reply_id = self._record(turn, entry_id, shown.text, stats, result.tokens, exact_hit)
        spans = [span for span in copied_spans(turn, result, self._text) if span.start < len(shown.model_text)]
        notice = turn.notice(stats.followed_share) if shown.outcome in (ANSWERED, CUT) else ""
        return Reply(text=shown.text, stats=stats, done=True, id=reply_id, spans=spans, notice=notice,
                     model_text=shown.model_text, staff_text=shown.staff_text)

    def _not_decoded(self, turn: Unanswered, seconds: float) -> Reply:
        """The decline, staff's text or the hand-off message instead of a decoded reply, stored as a served reply
        that nothing backed, so that staff see the question among those to write answers for (the Dashboard)."""
        text = shown_undecoded(turn.outcome, turn.reason, turn.passage, self.settings.handoff_message).text
        stats = ReplyStats.for_hand_off(seconds, turn.outcome, turn.reason)
        reply_id = self.cache.record_reply(
            NewReply(question=turn.question, answer=text, stats=stats.to_json(), seconds=seconds,
                     stop_reason=turn.outcome, session_id=turn.session_id, backed=False, outcome=turn.outcome,
                     outcome_reason=turn.reason)
        )
        return Reply(text=text, stats=stats, done=True, id=reply_id, staff_text=text)

    def _suggest_wordings(self, turn: ChatTurn) -> None:
        """The question becomes a suggested wording of each approved answer the check accepted for it. It
        matches nothing until staff confirm it, so a wrong grounding never reinforces itself. A follow-up
        ("make it shorter") means something only in its conversation, so it suggests nothing."""
        if turn.history:
            return
        for hit in turn.matched:
            try:
                self.cache.suggest_wording(hit.id, turn.question)
            except KeyError:  # staff deleted or merged the entry while the reply decoded
                continue

    def _record(
        self, turn: ChatTurn, entry_id: int, text: str, stats: ReplyStats, tokens: list[int], exact_hit: bool
    ) -> int:
        return self.cache.record_reply(
            NewReply(
                question=turn.question, answer=text, entry_id=entry_id,
                history=[{"role": m.role, "content": m.content} for m in turn.history], stats=stats.to_json(),
                speedup=stats.speedup, seconds=stats.seconds, greedy_seconds=stats.greedy_seconds_estimate,
                tokens_per_forward_pass=stats.tokens_per_forward_pass, stop_reason=stats.stop_reason or None,
                # The prompt and reply token ids are kept so that `verify` can rerun exactly this decode.
                prompt_ids=turn.prompt.ids, token_ids=list(tokens),
                reference_entry_ids=[h.id for h in turn.references], exact_hit=exact_hit,
                session_id=turn.session_id, backed=bool(turn.matched), outcome=stats.outcome,
                outcome_reason=stats.outcome_reason,
            )
        )

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def references(self, reply: Reply) -> ReplyReferences:
        """The cached answers and the help article a reply was decoded with, for showing beside it."""
        entries = {ref.id: self.cache.get_entry(ref.id) for ref in reply.stats.references}
        article = self.cache.get_article(reply.stats.article.id) if reply.stats.article else None
        return ReplyReferences(entries, article)

    # --- staff tools -----------------------------------------------------------------------------

    def verify(self, reply_id: int) -> Verification:
        """Rerun the stored reply's prompt with its decoding rule one token at a time; compare tokens and times."""
        reply = self.cache.get_reply(reply_id)
        if reply is None:
            raise KeyError(f"no reply {reply_id}")
        prompt_ids, tokens = reply.prompt_ids, reply.token_ids
        if reply.stop_reason in NOT_DECODED:
            raise ValueError(f"reply {reply_id} was {reply.stop_reason}, not decoded: there is no decoding to verify")
        if not prompt_ids or tokens is None:
            raise ValueError(f"reply {reply_id} was stored without its prompt; it cannot be verified")
        stats = ReplyStats.from_json(reply.stats) if reply.stats else None
        greedy = self._rerun_greedy(stats, prompt_ids, self._budget(stats, tokens))
        identical = greedy.tokens == tokens
        reply_seconds = max(reply.seconds or 0.0, 1e-6)
        speedup = greedy.seconds / reply_seconds
        self.cache.set_verification(reply_id, identical, speedup)
        return Verification(reply_id, identical, greedy.seconds, reply_seconds, speedup)

    def _rerun_greedy(self, stats: ReplyStats | None, prompt_ids: list[int], budget: int) -> DecodeResult:
        """Greedy decoding of a stored reply's prompt on the forward, step shape and rule it was decoded with."""
        steps = stats.steps() if stats else ONE_TOKEN_STEPS
        rule = stats.rule() if stats else REPETITION_OFF
        return self.greedy(prompt_ids, budget, steps, rule, self._model_for(stats))

    def greedy(
        self, prompt_ids: list[int], budget: int, steps: StepConfig, rule: RepetitionRule, model=None,
    ) -> DecodeResult:
        """Greedy decoding on `model` (the engine's forward by default), through the scheduler where it owns it."""
        model, eos = model if model is not None else self.engine.model, self.tokenizer.eos_token_id
        if self.scheduler is not None and model is self.scheduler.model:
            return scheduled_greedy(self.scheduler, prompt_ids, LlmaOptions(budget, eos, repetition=rule), steps)
        with self._model_lock:
            return greedy_generate(model, prompt_ids, budget, eos, steps=steps, repetition=rule)

    @staticmethod
    def _budget(stats: ReplyStats | None, tokens: list[int]) -> int:
        """The token budget to rerun with: a reply the stop rule cut ran past its length before the cut."""
        if stats is not None and stats.stop_reason == "repetition":
            return stats.max_new_tokens or len(tokens) + stats.rule().stop_ngram
        return len(tokens) or 1

    def _model_for(self, stats: ReplyStats | None):
        """The forward a stored reply was decoded on, rebuilt from its recipe alone (packed here once, when first
        asked): the engine's own where the packing is the same; transformers' for a reply stored without stats."""
        recipe = stats.recipe() if stats is not None else DecodeRecipe()
        if recipe.packing not in self._repacked:
            self._repacked[recipe.packing] = self.engine.rebuilt(recipe).model
        return self._repacked[recipe.packing]

    def feedback(self, reply_id: int, value: int, reason: str = "") -> None:
        """Thumbs up (+1) or down (-1) with an optional reason; 0 takes the rating back."""
        if value not in (-1, 0, 1):
            raise InputError("feedback must be +1, -1 or 0")
        self.cache.set_feedback(reply_id, value, clean_text(reason)[:2000])

    def with_settings(self, **changes) -> "ChatService":
        """A service sharing engine and cache but with other settings (for tests and the benchmark)."""
        return ChatService(self.engine, self.cache, replace(self.settings, **changes), self.cost, self.scheduler)

