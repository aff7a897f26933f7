"""Start the helpdesk: read settings once, build the chat service, mount the web pages, serve them."""

import sys
from dataclasses import replace
from pathlib import Path
from typing import Literal, NoReturn

import torch
import uvicorn
from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cache import StaffStore
from cache.embedder import DEFAULT_MODEL as DEFAULT_EMBEDDING_MODEL
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from cache.embedder import model_dir_of
from chatbot import Accounts, AdminService, Admission, Bootstrap, ChatLimits, ChatService, ChatSettings, InputError
from chatbot.settings import DEFAULT_HANDOFF_MESSAGE, embedding_dtype_for
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
    one_core_here,
    pick_device,
    pick_dtype,
)
from webui import LoginLimits, build_app

EMBEDDING_CHOICES = (f"{DEFAULT_EMBEDDING_MODEL} (`make run` prepares it), {EMBEDDING_BUNDLED} (bundled) or a "
                     "sentence-transformers folder")


class Settings(BaseSettings):
    """Every knob of the app, read from CHATBOT_* environment variables (CHATBOT_PORT=8000, ...)."""

    model_config = SettingsConfigDict(env_prefix="CHATBOT_")

    model: Path | None = None  # a Hugging Face model folder; None is the bundled SmolLM2-135M-Instruct
    data_dir: Path = Path("var")
    db_url: str | None = None  # any SQLAlchemy URL; None is SQLite in data_dir
    host: str = "127.0.0.1"
    port: int = 7860
    threads: int = 2
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 where the CPU or GPU has bf16 kernels
    # auto: measured by the deployment's first start and kept in its database; 0: one-token steps; W
    step_width: str = "auto"
    # auto: the weight format (dense, int8, int4, q4) measured cheapest by the first start (alone and in a full
    # shared forward), kept in the database
    weights: str = "auto"
    max_new_tokens: int = ChatSettings.max_new_tokens
    max_concurrent_replies: int = ChatSettings.max_concurrent_replies  # replies sharing one packed forward
    prefix_cache_mb: int = DEFAULT_PREFIX_CACHE_BYTES // 2**20  # prompt chunks kept for prompts that begin alike
    warm_prefixes: bool = True  # prefill the help centre's prompt beginnings into that cache while idle
    references_k: int = ChatSettings.references_k
    similarity_threshold: float = ChatSettings.similarity_threshold
    use_knowledge_base: bool = ChatSettings.use_knowledge_base
    grounding: Literal["approved", "all", "off"] = ChatSettings.grounding
    # None: the values tuned for the embedding model (chatbot/settings.py TUNED)
    grounding_threshold: float | None = None
    grounding_margin: float | None = None
    grounding_article_margin: float | None = None
    article_match_threshold: float | None = None
    article_match_margin: float | None = None
    # all-mpnet-base-v2 (prepared by `make run`), all-MiniLM-L6-v2 (bundled, 5x faster to embed), or a folder
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    embedding_dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 where the CPU has it natively
    lexical_weight: float | None = None
    match_answers: bool = ChatSettings.match_answers
    grounding_answers: int = ChatSettings.grounding_answers
    grounding_token_budget: int = ChatSettings.grounding_token_budget
    repetition: Literal["dry", "off"] = "dry"  # the decoding rule: greedy with DRY and a stop rule, or plain greedy
    prompt_layout: Literal["system", "turn", "answer"] = ChatSettings.prompt_layout
    # A first question no approved answer and no help article covers: the hand-off message, not a made-up reply
    uncovered: Literal["hand-off", "answer"] = "hand-off"
    handoff_message: str = DEFAULT_HANDOFF_MESSAGE
    check_sources: bool = True  # an article or approved answer must answer the question
    source_coverage: float = ChatSettings.source_coverage
    source_coverage_close: float = ChatSettings.source_coverage_close
    source_close_score: float = ChatSettings.source_close_score
    check_replies: Literal["cut", "record", "off"] = "cut"  # each sentence checked against the sources
    sentence_overlap: float = ChatSettings.sentence_overlap
    sentence_pairs: float = ChatSettings.sentence_pairs
    admin_user: str = "admin"  # the bootstrap admin, made only while the database has no admin account
    admin_password: SecretStr | None = None  # None: a random one is made and printed at start
    login_max_failures: int = LoginLimits.max_failures
    login_window_s: float = LoginLimits.window_s
    login_lockout_s: float = LoginLimits.lockout_s
    login_lockout_max_s: float = LoginLimits.lockout_max_s
    admin_idle_s: float = LoginLimits.idle_s
    chat_queue_size: int = ChatLimits.queue_size
    chat_per_client: int = ChatLimits.per_client
    chat_per_address: int = ChatLimits.per_address

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
        return device, pick_dtype(self.dtype, device)

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
    accounts = Accounts(StaffStore.open(settings.data_dir, settings.db_url))
    try:
        bootstrap = accounts.bootstrap(settings.admin_user, _secret(settings.admin_password))
    except InputError as err:
        _fail(f"CHATBOT_ADMIN_PASSWORD: {err}")
    print(_announcement(bootstrap, "CHATBOT_ADMIN_PASSWORD"), flush=True)
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
