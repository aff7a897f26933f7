"""One set of defaults: ChatSettings' are the app's, so `ChatService.create()` answers as `make run` does."""

import pytest

import app
import chatbot.service
from cache.embedder import DEFAULT_MODEL
from chatbot import ChatService, ChatSettings


@pytest.fixture
def unset(monkeypatch):
    """No CHATBOT_* variable set: every setting at its default."""
    for name in app.Settings.model_fields:
        monkeypatch.delenv(f"CHATBOT_{name.upper()}", raising=False)


def test_the_apps_chat_settings_by_default_are_chat_settings_own(unset):
    assert app.Settings().chat_settings() == ChatSettings()


def test_create_without_settings_answers_as_the_app_does(unset, monkeypatch, tmp_path):
    """No model loads and nothing opens: only the settings create() starts the service with are looked at."""
    started = []
    monkeypatch.setattr(chatbot.service, "load_model", lambda *args, **kwargs: (None, None))
    monkeypatch.setattr(chatbot.service, "open_cache", lambda *args, **kwargs: None)
    monkeypatch.setattr(chatbot.service, "build_engine", lambda *args, **kwargs: None)
    monkeypatch.setattr(ChatService, "start", classmethod(lambda cls, *args: started.append(args[3])))
    ChatService.create(tmp_path)
    assert started == [app.Settings().chat_settings()]
    settings = started[0]
    assert settings.embedding_model == DEFAULT_MODEL and settings.warm_prefixes
    assert settings.uncovered == "hand-off" and settings.check_sources and settings.check_replies == "cut"
