"""Start the helpdesk: read settings once, build the chat service, mount the web pages, serve them."""

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, NoReturn

import torch
import uvicorn
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from cache import StaffStore
from chatbot import Accounts, AdminService, Admission, Bootstrap, ChatLimits, ChatService, ChatSettings, InputError
from data import example_questions
from decoding import ModelLoadError, cpu_features, pick_device, pick_dtype
from webui import LoginLimits, build_app


@dataclass(frozen=True)
class Engine:
    """Where and how the model runs, resolved once from the settings and this machine."""

    device: torch.device
    dtype: torch.dtype
    forward: str = "transformers"  # "packed" (decoding/packed.py) where the architecture allows
    step_width: int | None = None

    def describe(self) -> str:
        steps = f"{self.step_width}-wide decode steps" if self.step_width else "one-token decode steps"
        where = f"{str(self.dtype).removeprefix('torch.')} on {self.device}"
        return f"{where}, {self.forward} forward, {steps} ({cpu_features().model_name})"


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
    # None: measured once per machine (decoding.choose_step_width); 0: one-token steps
    step_width: int | None = Field(default=None, ge=0)
    max_new_tokens: int = ChatSettings.max_new_tokens
    references_k: int = ChatSettings.references_k
    similarity_threshold: float = ChatSettings.similarity_threshold
    use_knowledge_base: bool = ChatSettings.use_knowledge_base
    grounding: Literal["approved", "all", "off"] = ChatSettings.grounding
    grounding_threshold: float = ChatSettings.grounding_threshold
    grounding_answers: int = ChatSettings.grounding_answers
    grounding_token_budget: int = ChatSettings.grounding_token_budget
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

    def engine(self) -> Engine:
        """Device and dtype; the forward and step width are known once the model is loaded."""
        device = pick_device(self.device)
        return Engine(device, pick_dtype(self.dtype, device))

    def chat_settings(self) -> ChatSettings:
        return ChatSettings(
            max_new_tokens=self.max_new_tokens, references_k=self.references_k,
            similarity_threshold=self.similarity_threshold, use_knowledge_base=self.use_knowledge_base,
            grounding=self.grounding, grounding_threshold=self.grounding_threshold,
            grounding_answers=self.grounding_answers, grounding_token_budget=self.grounding_token_budget,
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
        engine = settings.engine()
        chat_settings, chat_limits = settings.chat_settings(), settings.chat_limits()
    except (ValidationError, ValueError) as err:
        _fail(f"bad setting: {err}")
    try:
        service = ChatService.create(
            settings.data_dir, settings.model, settings.db_url, settings.threads, chat_settings,
            dtype=engine.dtype, device=engine.device, step_width=settings.step_width,
        )
        engine = replace(engine, forward=service.forward_name, step_width=service.settings.step_width)
    except ModelLoadError as err:
        _fail(f"cannot load the model: {err}")
    accounts = Accounts(StaffStore.open(settings.data_dir, settings.db_url))
    try:
        bootstrap = accounts.bootstrap(settings.admin_user, _secret(settings.admin_password))
    except InputError as err:
        _fail(f"CHATBOT_ADMIN_PASSWORD: {err}")
    print(_announcement(bootstrap, "CHATBOT_ADMIN_PASSWORD"), flush=True)
    print(f"Engine: {engine.describe()}", flush=True)
    print(f"Chat: http://{settings.host}:{settings.port}/   Admin: http://{settings.host}:{settings.port}/admin")
    admin = AdminService(service.cache, service, accounts)
    app = build_app(service, admin, example_questions(), Admission(chat_limits), settings.login_limits())
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
