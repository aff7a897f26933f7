"""Start the helpdesk: read settings once, build the chat service, mount the web pages, serve them."""

import sys
from dataclasses import replace
from pathlib import Path
from typing import Literal, NoReturn, get_args, get_origin

import torch
import uvicorn
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cache import StaffStore
from cache.embedder import DEFAULT_MODEL as DEFAULT_EMBEDDING_MODEL
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from cache.embedder import model_dir_of
from chatbot import Accounts, AdminService, Admission, Bootstrap, ChatLimits, ChatService, ChatSettings, InputError
from chatbot.settings import embedding_dtype_for
from data import example_questions
from decoding import (
    DEFAULT_PREFIX_CACHE_BYTES,
    NAMED_RULES,
    ONE_TOKEN,
    WEIGHTS_SETTINGS,
    EngineConfigError,
    ModelLoadError,
    StepWidth,
    check_lossless,
    in_passing_thread,
    may_hold_integer_weights,
    one_core_here,
    pick_device,
    pick_dtype,
)
from webui import LoginLimits, build_app

EMBEDDING_CHOICES = (f"{DEFAULT_EMBEDDING_MODEL} (`make run` prepares it), {EMBEDDING_BUNDLED} (bundled) or a "
                     "sentence-transformers folder")
# The name of ChatSettings' decoding rule among CHATBOT_REPETITION's choices.
DEFAULT_REPETITION = next(name for name, rule in NAMED_RULES.items() if rule == ChatSettings.repetition)


class Settings(BaseSettings):
    """Every knob of the app, read from CHATBOT_* environment variables (CHATBOT_PORT=8000, ...). A default that
    shapes a chat turn is ChatSettings' own."""

    model_config = SettingsConfigDict(env_prefix="CHATBOT_")

    model: Path | None = Field(None, description=(
        "A local Hugging Face LLaMA-family model folder with a chat template; empty: the bundled "
        "SmolLM2-135M-Instruct. Cached answers are kept per model id."))
    data_dir: Path = Field(Path("var"), description="SQLite database, FAISS index and measured cost curves.")
    db_url: str | None = Field(None, description=(
        "Any SQLAlchemy URL (e.g. postgresql+psycopg://user:pw@host/db, shared by several replicas); "
        "empty: SQLite in the data folder."))
    host: str = Field("127.0.0.1", description="Where the web app listens.")
    port: int = Field(7860, description="Where the web app listens.")
    threads: int = Field(2, description="CPU threads of the decoding scheduler.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when visible, else the CPU.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description=(
        "auto: bfloat16 where the CPU (AVX512-BF16 or AMX) or the GPU has bf16 kernels, or on an AVX2 CPU whose "
        "weights may be integer (auto, q4, int8, int4), else float32."))
    step_width: str = Field("auto", description=(
        "Every decode forward this many tokens wide; 0: one-token steps (refused in bfloat16, where LLMA would "
        "not equal the rule's decoding). auto: measured by the deployment's first start and kept in its database, "
        "so every replica and restart decodes alike."))
    weights: str = Field("auto", description=(
        "How the packed forward holds its weights: dense, int8, int4 (the bundled Q4_1 weights exactly) or q4 "
        "(the same 4 bits through this project's own product). auto: the format measured cheapest by the "
        "deployment's first start, alone and in a full shared forward, kept in its database."))
    max_new_tokens: int = Field(ChatSettings.max_new_tokens, description="Reply length limit in tokens.")
    max_concurrent_replies: int = Field(ChatSettings.max_concurrent_replies, description=(
        "Replies decoding at once, their blocks stacked into one shared forward; more wait for a slot in "
        "arrival order. 1: replies take turns."))
    prefix_cache_mb: int = Field(DEFAULT_PREFIX_CACHE_BYTES // 2**20, description=(
        "Memory for the keys and values of prompt chunks kept for later prompts that begin alike (the system "
        "prompt, a help article); 0 keeps none."))
    warm_prefixes: bool = Field(ChatSettings.warm_prefixes, description=(
        "While no reply is decoding, prefill the help centre's prompt beginnings into that cache."))
    references_k: int = Field(ChatSettings.references_k, description=(
        "How many similar past answers become references LLMA may copy from."))
    similarity_threshold: float = Field(ChatSettings.similarity_threshold, description=(
        "Least cosine of a past answer's question for it to be a reference."))
    use_knowledge_base: bool = Field(ChatSettings.use_knowledge_base, description=(
        "Put the best-matching help article into the prompt."))
    grounding: Literal["approved", "all", "off"] = Field(ChatSettings.grounding, description=(
        "Which cached answers may go into the prompt: staff-approved only, also the model's unreviewed ones, or "
        "none."))
    grounding_threshold: float | None = Field(ChatSettings.grounding_threshold, description=(
        "Least fused score (cosine plus weighted BM25) of the best approved match for it to ground; empty: the "
        "value tuned for the embedding model (chatbot/settings.py TUNED; tune: python -m bench.retrieval)."))
    grounding_margin: float | None = Field(ChatSettings.grounding_margin, description=(
        "How far a best match whose article is not the chosen one must be ahead of the runner-up; empty: tuned."))
    grounding_article_margin: float | None = Field(ChatSettings.grounding_article_margin, description=(
        "The same margin for a best match from the chosen article; empty: tuned."))
    article_match_threshold: float | None = Field(ChatSettings.article_match_threshold, description=(
        "The help article comes from the best approved answer's own article when the question matches that "
        "answer this clearly (1.01 turns this off); empty: tuned."))
    article_match_margin: float | None = Field(ChatSettings.article_match_margin, description=(
        "... and this far ahead of the runner-up; empty: tuned."))
    embedding_model: str = Field(ChatSettings.embedding_model, description=(
        f"The sentence embedding model: {EMBEDDING_CHOICES}. Changing it re-embeds the cache at the next start."))
    embedding_dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description=(
        "auto: bfloat16 where the CPU multiplies bf16 natively. Changing it re-embeds the cache at the next "
        "start."))
    lexical_weight: float | None = Field(ChatSettings.lexical_weight, description=(
        "The weight of BM25 in the fused score; empty: tuned."))
    match_answers: bool = Field(ChatSettings.match_answers, description=(
        "An approved entry also scores by its answer's cosine where that is higher."))
    grounding_answers: int = Field(ChatSettings.grounding_answers, description=(
        "How many approved answers go into the prompt."))
    grounding_token_budget: int = Field(ChatSettings.grounding_token_budget, description=(
        "Answer tokens the grounding may add to the prompt."))
    repetition: Literal["dry", "off"] = Field(DEFAULT_REPETITION, description=(
        "The decoding rule every reply equals: dry is greedy with a DRY penalty on repeating the reply itself, a "
        "stop when it repeats 16 tokens anyway, an end bonus past 96 tokens and grounded numbers; off is plain "
        "greedy (replies often loop to the limit)."))
    prompt_layout: Literal["system", "turn", "answer"] = Field(ChatSettings.prompt_layout, description=(
        "Where an approved answer sits in the prompt: given to the customer's very question (answer, copied "
        "most), as an earlier exchange (turn) or in the system message (system)."))
    uncovered: Literal["hand-off", "answer"] = Field(ChatSettings.uncovered, description=(
        "A first question no approved answer and no help article covers: reply the hand-off message without "
        "decoding, or let the model answer on its own (with a notice)."))
    handoff_message: str = Field(ChatSettings.handoff_message, description="What a handed-off question gets.")
    check_sources: bool = Field(ChatSettings.check_sources, description=(
        "Check that each article and approved answer answers the question before it goes into the prompt; "
        "decline messages that try to change the instructions or to have the assistant act on an account's sign-in; "
        "answer sums with the article's figures and the sum worked from them."))
    source_coverage: float = Field(ChatSettings.source_coverage, description=(
        "The share of the question's distinctive words (weighted by rarity in the help centre) a source must "
        "use."))
    source_coverage_close: float = Field(ChatSettings.source_coverage_close, description=(
        "... or this share when retrieval found the source at least source_close_score close."))
    source_close_score: float = Field(ChatSettings.source_close_score, description=(
        "The fused score from which the smaller share applies."))
    check_replies: Literal["cut", "record", "off"] = Field(ChatSettings.check_replies, description=(
        "Check each sentence before it is shown and cut the reply at the first unsupported one; record checks "
        "without cutting; off checks nothing."))
    sentence_overlap: float = Field(ChatSettings.sentence_overlap, description=(
        "The share of a sentence's words that must be the sources' (a larger model may loosen it)."))
    sentence_pairs: float = Field(ChatSettings.sentence_pairs, description=(
        "The share of a sentence's consecutive content-word pairs that must be the sources'."))
    admin_user: str = Field("admin", description=(
        "The bootstrap admin, made only while the database has no admin account."))
    admin_password: SecretStr | None = Field(None, description=(
        "Its password; empty: a random one is made and printed at start."))
    login_max_failures: int = Field(LoginLimits.max_failures, description=(
        "This many failed logins for one name, or from one address, within the window lock it."))
    login_window_s: float = Field(LoginLimits.window_s, description="That window, in seconds.")
    login_lockout_s: float = Field(LoginLimits.lockout_s, description=(
        "The first lockout; each further one in a row doubles."))
    login_lockout_max_s: float = Field(LoginLimits.lockout_max_s, description="... up to this.")
    admin_idle_s: float = Field(LoginLimits.idle_s, description="A staff session unused this long logs in again.")
    chat_queue_size: int = Field(ChatLimits.queue_size, description=(
        "Questions waiting for or getting an answer, all clients together; more are refused at once."))
    chat_per_client: int = Field(ChatLimits.per_client, description="... of them from one browser session.")
    chat_per_address: int = Field(ChatLimits.per_address, description=(
        "... from one IP address; 0 turns this off (set 0 behind a reverse proxy)."))

    @field_validator("step_width")
    @classmethod
    def _check_step_width(cls, value: str) -> str:
        StepWidth.parse(value)  # a bad one is refused here, at start, with the choices
        return value

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: str) -> str:
        if value not in WEIGHTS_SETTINGS:
            raise ValueError(f"CHATBOT_WEIGHTS must be one of {', '.join(WEIGHTS_SETTINGS)}, not {value!r}")
        return value

    @field_validator("embedding_model")
    @classmethod
    def _check_embedding_model(cls, value: str) -> str:
        if not model_dir_of(value).is_dir():  # refused at start, before the model loads
            raise ValueError(f"CHATBOT_EMBEDDING_MODEL: no folder for {value!r}; {EMBEDDING_CHOICES}")
        return value

    def step_width_setting(self) -> StepWidth:
        return StepWidth.parse(self.step_width)

    def device_and_dtype(self) -> tuple[torch.device, torch.dtype]:
        """Where and in what precision the model runs; the forward and width are decided once it is loaded."""
        device = pick_device(self.device)
        integer = may_hold_integer_weights(self.weights, self.step_width_setting())
        return device, pick_dtype(self.dtype, device, integer)

    def chat_settings(self) -> ChatSettings:
        return ChatSettings(
            max_new_tokens=self.max_new_tokens, references_k=self.references_k,
            similarity_threshold=self.similarity_threshold, use_knowledge_base=self.use_knowledge_base,
            grounding=self.grounding, grounding_threshold=self.grounding_threshold,
            grounding_margin=self.grounding_margin, grounding_article_margin=self.grounding_article_margin,
            lexical_weight=self.lexical_weight,
            article_match_threshold=self.article_match_threshold, article_match_margin=self.article_match_margin,
            match_answers=self.match_answers,
            grounding_answers=self.grounding_answers, grounding_token_budget=self.grounding_token_budget,
            repetition=NAMED_RULES[self.repetition], prompt_layout=self.prompt_layout,
            max_concurrent_replies=self.max_concurrent_replies, embedding_model=self.embedding_model,
            embedding_dtype=embedding_dtype_for(self.embedding_dtype), warm_prefixes=self.warm_prefixes,
            uncovered=self.uncovered, handoff_message=self.handoff_message, check_sources=self.check_sources,
            source_coverage=self.source_coverage, source_coverage_close=self.source_coverage_close,
            source_close_score=self.source_close_score, check_replies=self.check_replies,
            sentence_overlap=self.sentence_overlap, sentence_pairs=self.sentence_pairs,
        )

    def login_limits(self) -> LoginLimits:
        return LoginLimits(
            max_failures=self.login_max_failures, window_s=self.login_window_s, lockout_s=self.login_lockout_s,
            lockout_max_s=self.login_lockout_max_s, idle_s=self.admin_idle_s,
        )

    def chat_limits(self) -> ChatLimits:
        return ChatLimits(self.chat_queue_size, self.chat_per_client, self.chat_per_address)


def settings_reference() -> str:
    """docs/settings.md: every setting's variable, type or choices, default and description (`make settings-doc`)."""
    lines = ["# Settings", "",
             "Environment variables, read once by `app.py`. Written by `make settings-doc` from the descriptions of",
             "`app.Settings`; tests/test_settings_doc.py keeps it current. No default: the setting is unset.", "",
             "| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "" if field.default is None else f"`{field.default}`"
        lines.append(f"| `CHATBOT_{name.upper()}` | {_type_of(field.annotation)} | {default} | {field.description} |")
    return "\n".join(lines) + "\n"


def _type_of(annotation) -> str:
    """A setting's choices, or its type's name (of X | None, X's)."""
    if get_origin(annotation) is Literal:
        return ", ".join(f"`{choice}`" for choice in get_args(annotation))
    kinds = [kind for kind in get_args(annotation) if kind is not type(None)] or [annotation]
    return kinds[0].__name__


def main() -> None:
    try:
        settings = Settings()
        device, dtype = settings.device_and_dtype()
        chat_settings, chat_limits = settings.chat_settings(), settings.chat_limits()
        if settings.step_width_setting() == ONE_TOKEN:
            check_lossless(dtype, None)  # refused before the model loads; build_engine checks it again after
    except EngineConfigError as err:
        _fail(f"CHATBOT_DTYPE / CHATBOT_STEP_WIDTH: {err}")
    except (ValidationError, ValueError) as err:
        _fail(f"bad setting: {err}")
    torch.set_num_threads(settings.threads)  # process-wide: set here, in the entry point, only
    # Staff accounts before the model: a wrong password setting fails at once, and the login is printed while the
    # model and the help centre load.
    accounts = Accounts(StaffStore.open(settings.data_dir, settings.db_url))
    try:
        bootstrap = accounts.bootstrap(settings.admin_user, _secret(settings.admin_password))
    except InputError as err:
        _fail(f"CHATBOT_ADMIN_PASSWORD: {err}")
    print(_announcement(bootstrap, "CHATBOT_ADMIN_PASSWORD"), flush=True)
    try:
        service = in_passing_thread(lambda: ChatService.create(
            settings.data_dir, settings.model, settings.db_url, chat_settings,
            dtype=dtype, device=device, step_width=settings.step_width_setting(), weights=settings.weights,
            prefix_cache_bytes=settings.prefix_cache_mb * 2**20,
        ))
    except ModelLoadError as err:
        _fail(f"cannot load the model: {err}")
    except EngineConfigError as err:
        _fail(str(err))
    # The scheduler's thread alone computes on several cores; the server's threads go to one as they first embed or
    # pick tokens (decoding/threads.py: not torch.set_num_threads, whose process-wide state slows the scheduler), and
    # so does this one, which computes nothing more (its setting at 2 measured a tenth slower prefills there).
    one_core_here()
    print(f"Engine: {service.describe()}", flush=True)
    if service.warm_queued:
        print(f"Warm-up: {service.warm_queued} help-centre prompt beginnings go into the prefix cache while idle",
              flush=True)
    chosen = service.settings
    print(f"Retrieval: {service.cache.embedder_name} embeddings; an approved answer grounds from "
          f"{chosen.grounding_threshold} (margin {chosen.grounding_margin}, "
          f"{chosen.grounding_article_margin} where its article is the question's)", flush=True)
    print(f"Chat: http://{settings.host}:{settings.port}/   Admin: http://{settings.host}:{settings.port}/admin")
    admin = AdminService(service.cache, service, accounts)
    admission = Admission(replace(chat_limits, at_once=service.turns_at_once))  # the turns the service decodes at once
    app = build_app(service, admin, example_questions(), admission, settings.login_limits())
    uvicorn.run(app, host=settings.host, port=settings.port, timeout_graceful_shutdown=5)


def _announcement(bootstrap: Bootstrap, env_var: str) -> str:
    """The one line printed at start; shows the password only when it was generated."""
    if not bootstrap.created:
        return "Admin login: staff accounts in the database (add or reset one: python -m chatbot.users --help)"
    password = bootstrap.password or f"(the password set in {env_var})"
    return f"Admin login: {bootstrap.name} / {password}"


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _fail(message: str) -> NoReturn:
    """A configuration mistake: one line on stderr and exit code 2, no traceback."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
