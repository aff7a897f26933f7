"""The admin service on a real SQLite cache and the bundled tokenizer (a tiny random model stands in for the LLM)."""

from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from cache import AnswerCache, Embedder, NewAnswer
from chatbot import AdminService, ArticleUse, ChatService, ChatSettings, InputError, ReferenceUse, Reply, ReplyStats
from decoding import CostCurve
from decoding.model_loading import DEFAULT_MODEL_DIR

CURVE = CostCurve(sizes=(1, 2), seconds=(0.1, 0.1))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load()


@pytest.fixture
def chat(tmp_path: Path, embedder: Embedder, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    cache = AnswerCache.open(tmp_path, embed=embedder.embed, dim=embedder.dim)
    yield ChatService(tiny_model, tokenizer, cache, ChatSettings(), CURVE, "tiny")
    cache.close()


@pytest.fixture
def admin(chat: ChatService) -> AdminService:
    return AdminService(chat.cache, chat)


def add_entry(admin: AdminService, question: str = "How do I reset my password?") -> int:
    return admin.cache.add_answer(NewAnswer(question=question, answer="Open Settings.", answer_ids=[1, 2],
                                            model_id="tiny"))


def test_an_edited_answer_is_stored_with_its_tokens_and_end_of_sequence(admin, chat):
    entry_id = add_entry(admin)
    assert admin.edit_entry(entry_id, "How do I reset my password?", "Use the reset link.")
    entry = admin.get_entry(entry_id)
    expected = chat.tokenizer("Use the reset link.", add_special_tokens=False)["input_ids"]
    assert entry.answer == "Use the reset link." and entry.answer_ids == [*expected, chat.tokenizer.eos_token_id]


def test_an_edited_question_keeps_the_answer_tokens(admin):
    entry_id = add_entry(admin)
    assert admin.edit_entry(entry_id, "Password reset?", "Open Settings.")
    entry = admin.get_entry(entry_id)
    assert (entry.question, entry.answer_ids) == ("Password reset?", [1, 2])


def test_editing_nothing_unknown_or_empty_changes_nothing(admin):
    entry_id = add_entry(admin)
    assert not admin.edit_entry(entry_id, "How do I reset my password?", "Open Settings.")
    with pytest.raises(KeyError):
        admin.edit_entry(entry_id + 1, "q", "a")
    with pytest.raises(InputError, match="must not be empty"):
        admin.edit_entry(entry_id, "q", "   ")
    assert admin.get_entry(entry_id).answer == "Open Settings."


def test_an_article_needs_an_id_a_title_and_a_body(admin):
    with pytest.raises(InputError, match="needs an id"):
        admin.save_article("printing", "Printing", " \n")
    saved = admin.save_article(" printing ", " Printing ", "Press Print.")
    assert (saved.id, saved.title) == ("printing", "Printing")
    assert [a.id for a in admin.list_articles()] == ["printing"]
    assert admin.delete_article("printing ") and admin.get_article("printing") is None


def test_references_of_a_reply_are_read_as_stored_now(admin, chat):
    kept, deleted = add_entry(admin), add_entry(admin, "Where is my invoice?")
    admin.delete_entry(deleted)
    admin.save_article("reset-password", "Resetting a password", "Use the link.")
    stats = ReplyStats(
        tokens=1, forward_passes=1, copied_tokens=0, seconds=0.1, tokens_per_second=10.0, greedy_seconds_estimate=0.1,
        speedup=1.0, speedup_method="estimate", exact_hit=False, copied_share=0.0, tokens_per_forward_pass=1.0,
        references=(ReferenceUse(kept, 0.9, 0), ReferenceUse(deleted, 0.8, 0)),
        article=ArticleUse("reset-password", 0.7),
    )
    found = chat.references(Reply("text", stats, done=True))
    assert found.entries[kept].question == "How do I reset my password?" and found.entries[deleted] is None
    assert found.article.title == "Resetting a password"
    assert chat.references(Reply("text", replace(stats, references=(), article=None))).entries == {}
