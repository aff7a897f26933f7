"""The admin service on a real SQLite cache and the bundled tokenizer (a tiny random model stands in for the LLM).

Every call names its acting staff user; roles are checked here, on the service, and every change is audited."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from transformers import AutoTokenizer

from cache import AnswerCache, AuditFilter, Embedder, NewAnswer, StaffStore
from chatbot import (
    Accounts,
    AdminService,
    ArticleUse,
    ChatService,
    ChatSettings,
    InputError,
    PermissionDenied,
    ReferenceUse,
    Reply,
    ReplyStats,
)
from decoding import CostCurve, Engine
from decoding.model_loading import DEFAULT_MODEL_DIR

CURVE = CostCurve(sizes=(1, 2), seconds=(0.1, 0.1))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load()


@pytest.fixture
def chat(tmp_path: Path, embedder: Embedder, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    cache = AnswerCache.open(tmp_path, embed=embedder.embed, dim=embedder.dim)
    engine = Engine.of(tiny_model, tokenizer, "tiny", step_width=None)
    yield ChatService(engine, cache, ChatSettings.decoding_only(), CURVE)
    cache.close()


FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)  # argon2id, cheap for tests
ADMIN, AGENT = "ada", "gus"


@pytest.fixture
def admin(chat: ChatService, tmp_path: Path) -> AdminService:
    accounts = Accounts(StaffStore.open(tmp_path), FAST_HASHER)
    accounts.add(ADMIN, "admin", "admin-password", actor="test")
    accounts.add(AGENT, "agent", "agent-password", actor="test")
    return AdminService(chat.cache, chat, accounts)


def add_entry(admin: AdminService, question: str = "How do I reset my password?") -> int:
    return admin.cache.add_answer(NewAnswer(question=question, answer="Open Settings.", answer_ids=[1, 2],
                                            model_id="tiny"))


def test_an_edited_answer_is_stored_with_its_tokens_and_end_of_sequence(admin, chat):
    entry_id = add_entry(admin)
    assert admin.edit_entry(ADMIN, entry_id, "How do I reset my password?", "Use the reset link.")
    entry = admin.get_entry(ADMIN, entry_id)
    expected = chat.tokenizer("Use the reset link.", add_special_tokens=False)["input_ids"]
    assert entry.answer == "Use the reset link." and entry.answer_ids == [*expected, chat.tokenizer.eos_token_id]


def test_an_edited_question_keeps_the_answer_tokens(admin):
    entry_id = add_entry(admin)
    assert admin.edit_entry(ADMIN, entry_id, "Password reset?", "Open Settings.")
    entry = admin.get_entry(ADMIN, entry_id)
    assert (entry.question, entry.answer_ids) == ("Password reset?", [1, 2])


def test_editing_nothing_unknown_or_empty_changes_nothing(admin):
    entry_id = add_entry(admin)
    assert not admin.edit_entry(ADMIN, entry_id, "How do I reset my password?", "Open Settings.")
    with pytest.raises(KeyError):
        admin.edit_entry(ADMIN, entry_id + 1, "q", "a")
    with pytest.raises(InputError, match="must not be empty"):
        admin.edit_entry(ADMIN, entry_id, "q", "   ")
    assert admin.get_entry(ADMIN, entry_id).answer == "Open Settings."


def test_an_article_needs_an_id_a_title_and_a_body(admin):
    with pytest.raises(InputError, match="needs an id"):
        admin.save_article(ADMIN, "printing", "Printing", " \n")
    saved = admin.save_article(ADMIN, " printing ", " Printing ", "Press Print.")
    assert (saved.id, saved.title) == ("printing", "Printing")
    assert [a.id for a in admin.list_articles(ADMIN)] == ["printing"]
    assert admin.delete_article(ADMIN, "printing ") and admin.get_article(ADMIN, "printing") is None


def test_references_of_a_reply_are_read_as_stored_now(admin, chat):
    kept, deleted = add_entry(admin), add_entry(admin, "Where is my invoice?")
    admin.delete_entry(ADMIN, deleted)
    admin.save_article(ADMIN, "reset-password", "Resetting a password", "Use the link.")
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


# --- roles and the audit trail ---------------------------------------------------------------------------


def audit_rows(admin: AdminService, **which) -> list:
    return admin.staff_store.audit(AuditFilter(**which), limit=10_000)


def write_export(admin: AdminService, tmp_path: Path) -> Path:
    path = tmp_path / "export.jsonl"
    admin.export_jsonl(ADMIN, path)
    return path


def agent_attempts(admin: AdminService, entry_id: int, export: Path, tmp_path: Path) -> dict:
    """Every admin-only call, made as the agent."""
    proposal = admin.propose_edit(AGENT, entry_id, "Reset?", "Use the link.")
    return {
        "edit": lambda: admin.edit_entry(AGENT, entry_id, "q", "a"),
        "delete": lambda: admin.delete_entry(AGENT, entry_id),
        "approve": lambda: admin.set_review(AGENT, [entry_id], "approved"),
        "reject": lambda: admin.set_review(AGENT, [entry_id], "rejected"),
        "import": lambda: admin.import_jsonl(AGENT, export),
        "export": lambda: admin.export_jsonl(AGENT, tmp_path / "agent.jsonl"),
        "article_save": lambda: admin.save_article(AGENT, "x", "X", "body"),
        "article_delete": lambda: admin.delete_article(AGENT, "reset-password"),
        "apply_proposal": lambda: admin.apply_proposal(AGENT, proposal),
        "dismiss_proposal": lambda: admin.dismiss_proposal(AGENT, proposal),
        "user_add": lambda: admin.add_user(AGENT, "eve", "admin", "eve-password"),
        "user_reset": lambda: admin.reset_password(AGENT, ADMIN, "taken-over!"),
        "user_role": lambda: admin.set_role(AGENT, AGENT, "admin"),
        "user_remove": lambda: admin.remove_user(AGENT, ADMIN),
        "list_users": lambda: admin.list_users(AGENT),
        "read_audit": lambda: admin.audit(AGENT),
    }


def test_an_agent_is_refused_every_admin_action_and_each_refusal_is_one_audit_row(admin, tmp_path):
    entry_id = add_entry(admin)
    admin.save_article(ADMIN, "reset-password", "Resetting", "Use the link.")
    export = write_export(admin, tmp_path)
    attempts = agent_attempts(admin, entry_id, export, tmp_path)
    before = len(audit_rows(admin))
    for name, attempt in attempts.items():
        with pytest.raises(PermissionDenied, match="Only an admin"):
            attempt()
        denied = audit_rows(admin, action="denied")[0]
        assert (denied.actor, denied.details["role"]) == (AGENT, "agent"), name
    assert len(audit_rows(admin)) == before + len(attempts)
    assert len(audit_rows(admin, actor=AGENT, action="denied")) == len(attempts)
    entry = admin.get_entry(AGENT, entry_id)  # agents may read
    assert entry.answer == "Open Settings." and admin.get_article(AGENT, "reset-password") is not None
    assert {u.name: u.role for u in admin.list_users(ADMIN)} == {ADMIN: "admin", AGENT: "agent"}
    assert not (tmp_path / "agent.jsonl").exists()


def test_an_unknown_or_removed_user_can_do_nothing(admin):
    entry_id = add_entry(admin)
    with pytest.raises(PermissionDenied):
        admin.get_entry("mallory", entry_id)
    admin.remove_user(ADMIN, AGENT)
    with pytest.raises(PermissionDenied):
        admin.list_entries(AGENT)
    assert [r.actor for r in audit_rows(admin, action="denied")] == [AGENT, "mallory"]


def test_every_admin_action_is_exactly_one_audit_row_naming_the_person(admin, tmp_path):
    entry_id, other = add_entry(admin), add_entry(admin, "Where is my invoice?")
    actions = [
        ("edit", entry_id, lambda: admin.edit_entry(ADMIN, entry_id, "Reset my password?", "Use the reset link.")),
        ("propose", entry_id, lambda: admin.propose_edit(AGENT, entry_id, "Reset?", "Open Settings > Security.")),
        ("edit", entry_id, lambda: admin.apply_proposal(ADMIN, admin.pending_proposals(ADMIN)[0].id)),
        ("propose", other, lambda: admin.propose_edit(AGENT, other, "Invoice?", "See Billing.")),
        ("dismiss_proposal", other, lambda: admin.dismiss_proposal(ADMIN, admin.pending_proposals(AGENT)[0].id)),
        ("approve", entry_id, lambda: admin.set_review(ADMIN, [entry_id], "approved")),
        ("reject", other, lambda: admin.set_review(ADMIN, [other], "rejected")),
        ("delete", other, lambda: admin.delete_entry(ADMIN, other)),
        ("export", None, lambda: write_export(admin, tmp_path)),
        ("import", None, lambda: admin.import_jsonl(ADMIN, tmp_path / "export.jsonl")),
        ("article_save", None, lambda: admin.save_article(ADMIN, "printing", "Printing", "Press Print.")),
        ("article_save", None, lambda: admin.save_article(ADMIN, "printing", "Printing", "Press Ctrl+P.")),
        ("article_delete", None, lambda: admin.delete_article(ADMIN, "printing")),
        ("user_add", None, lambda: admin.add_user(ADMIN, "nina", "agent", "nina-password")),
        ("user_reset", None, lambda: admin.reset_password(ADMIN, "nina", "nina-password-2")),
        ("user_role", None, lambda: admin.set_role(ADMIN, "nina", "admin")),
        ("user_remove", None, lambda: admin.remove_user(ADMIN, "nina")),
    ]
    for action, entry, run in actions:
        before = len(audit_rows(admin))
        run()
        rows = audit_rows(admin)
        assert len(rows) == before + 1, action
        newest = rows[0]
        assert (newest.action, newest.entry_id) == (action, entry)
        assert newest.actor == (AGENT if action == "propose" else ADMIN)
    edit = audit_rows(admin, action="edit")[-1]
    assert edit.details["before"]["answer"] == "Open Settings." and edit.details["after"]["answer"] == (
        "Use the reset link."
    )
    assert audit_rows(admin, action="edit")[0].details["proposal_id"] >= 1
    assert admin.get_entry(ADMIN, entry_id).answer == "Open Settings > Security."
    history = admin.entry_history(AGENT, entry_id)
    assert [r.action for r in history] == ["approve", "edit", "propose", "edit"]
    article = audit_rows(admin, action="article_save")[0]
    assert article.details["before"]["body"] == "Press Print." and article.target == "article:printing"


def test_nothing_changed_is_no_action_and_no_row(admin):
    entry_id = add_entry(admin)
    before = len(audit_rows(admin))
    assert not admin.edit_entry(ADMIN, entry_id, "How do I reset my password?", "Open Settings.")
    assert not admin.delete_entry(ADMIN, entry_id + 100)
    assert admin.set_review(ADMIN, [entry_id + 100], "approved") == 0  # no such entry
    assert len(audit_rows(admin)) == before


def test_the_audit_export_holds_every_matching_row_as_json_lines(admin, tmp_path):
    entry_id = add_entry(admin)
    admin.edit_entry(ADMIN, entry_id, "q1", "a1")
    admin.edit_entry(ADMIN, entry_id, "q2", "a2")
    path = tmp_path / "audit.jsonl"
    assert admin.export_audit(ADMIN, path, AuditFilter(entry_id=entry_id)) == 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["actor"], r["action"], r["details"]["after"]["answer"]) for r in lines] == [
        (ADMIN, "edit", "a1"), (ADMIN, "edit", "a2"),
    ]
