"""The running server through gradio_client and plain HTTP: the public /chat API, and the admin app's login wall."""

import math
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError, AuthenticationError

pytestmark = pytest.mark.slow

QUESTION = "How do I reset my password?"
FOLLOW_UP = "Thanks! And where do I find that setting?"
STATS_FIELDS = {
    "tokens", "forward_passes", "copied_tokens", "seconds", "tokens_per_second", "greedy_seconds_estimate", "speedup",
    "speedup_method", "exact_hit", "copied_share", "tokens_per_forward_pass", "references", "article", "reply_id",
}


@pytest.fixture(scope="module")
def first_answer(chat_client: Client) -> tuple[str, dict]:
    return chat_client.predict(QUESTION, [], api_name="/chat")


def test_chat_returns_text_and_stats(first_answer):
    text, stats = first_answer
    assert isinstance(text, str) and text.strip()
    assert STATS_FIELDS <= set(stats)
    assert 0 < stats["tokens"] <= 32 and stats["forward_passes"] >= 1 and stats["speedup"] > 0
    assert stats["article"]["id"] == "reset-password"  # the shipped knowledge base was seeded


def test_same_question_again_is_an_exact_hit(chat_client: Client, first_answer):
    text, stats = chat_client.predict(QUESTION, [], api_name="/chat")
    assert text == first_answer[0]
    # The prefill, then the stored answer verified whole: in one pass, or one W-wide pass per W tokens.
    width = stats["step_width"] or stats["tokens"]
    assert stats["exact_hit"] and stats["forward_passes"] <= 1 + math.ceil(stats["tokens"] / width)


@pytest.fixture(scope="module")
def follow_up(chat_client: Client, first_answer) -> tuple[list[dict], str, dict]:
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": first_answer[0]}]
    return history, *chat_client.predict(FOLLOW_UP, history, api_name="/chat")


def test_chat_takes_a_history(follow_up):
    _, text, stats = follow_up
    assert text.strip() and not stats["exact_hit"]


def test_a_rejected_edit_never_changes_the_reply(chat_client: Client, admin_client: Client, follow_up):
    history, text, _ = follow_up
    table, _ = admin_client.predict(FOLLOW_UP, "date", True, "candidate", api_name="/list_entries")
    entry_id = table["data"][0][0]
    admin_client.predict(entry_id, FOLLOW_UP, "Edited: call us at 555-0100.", api_name="/edit_entry")
    assert admin_client.predict(str(entry_id), "rejected", api_name="/review_entries") == "Rejected 1 entry."
    again, stats = chat_client.predict(FOLLOW_UP, history, api_name="/chat")
    assert again == text and stats["exact_hit"]  # the edited entry was drafted, and rejected by the model


@pytest.mark.parametrize("message", ["", "   \n "])
def test_empty_message_is_a_clear_error(chat_client: Client, message):
    with pytest.raises(AppError, match="Please type a question"):
        chat_client.predict(message, [], api_name="/chat")


def test_malformed_history_is_a_clear_error(chat_client: Client):
    with pytest.raises(AppError, match="role"):
        chat_client.predict("Hello", [{"role": "wizard", "content": "hi"}], api_name="/chat")


def test_public_api_lists_only_chat(chat_client: Client, server):
    api = chat_client.view_api(return_format="dict", print_info=False)
    assert list(api["named_endpoints"]) == ["/chat"]
    assert api["unnamed_endpoints"] == {}
    info = httpx.get(f"{server.url}/gradio_api/info").json()
    assert list(info["named_endpoints"]) == ["/chat"]


def test_public_app_has_no_admin_functions(server):
    config = httpx.get(f"{server.url}/config").json()
    names = {dep.get("api_name") for dep in config["dependencies"]}
    assert not names & {"verify", "edit_entry", "delete_entry", "export", "import", "list_entries", "save_article"}


@pytest.mark.parametrize("auth", [None, ("admin", "wrong password"), ("someone", "also wrong")])
def test_admin_client_needs_the_login(server, auth):
    with pytest.raises((AuthenticationError, ValueError)):
        Client(server.admin_url, auth=auth, verbose=False)


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/admin/config"),
        ("GET", "/admin/gradio_api/info"),
        ("GET", "/admin/gradio_api/openapi.json"),
        ("POST", "/admin/gradio_api/queue/join"),
        ("POST", "/admin/gradio_api/call/verify"),
        ("POST", "/admin/gradio_api/call/export"),
        ("POST", "/admin/gradio_api/run/list_entries"),
        ("POST", "/admin/gradio_api/upload"),
    ],
)
def test_admin_routes_refuse_plain_http(server, method, path):
    body = {"data": [1], "fn_index": 0, "session_hash": "outsider", "event_data": None, "trigger_id": None}
    response = httpx.request(method, server.url + path, json=body if method == "POST" else None)
    assert response.status_code == 401


def test_admin_without_slash_redirects_to_the_login(server):
    response = httpx.get(f"{server.url}/admin")
    assert response.status_code == 307 and response.headers["location"] == "/admin/"


def test_admin_login_form_rejects_wrong_password(server):
    response = httpx.post(f"{server.admin_url}login", data={"username": "admin", "password": "guess"})
    assert response.status_code == 400
    assert not response.cookies


def test_admin_api_works_with_the_login(admin_client: Client, first_answer):
    reply_id = first_answer[1]["reply_id"]
    verdict = admin_client.predict(reply_id, api_name="/verify")
    assert f"Reply {reply_id}: identical to step-by-step decoding" in verdict
    table, info = admin_client.predict("reset my password", "hits", True, api_name="/list_entries")
    assert any(QUESTION in str(row) for row in table["data"])
    assert "entries" in info


def test_knowledge_base_add_edit_delete(admin_client: Client):
    def article_ids() -> list[str]:
        return [row[0] for row in admin_client.predict(api_name="/list_articles")["data"]]

    assert "reset-password" in article_ids()  # seeded from data/articles.json
    saved = admin_client.predict("test-printing", "Printing files", "Open the file, then press Print.",
                                 api_name="/save_article")
    assert saved == "Saved article **test-printing**." and "test-printing" in article_ids()
    assert admin_client.predict("test-printing", api_name="/delete_article").startswith("Deleted")
    assert "test-printing" not in article_ids()


def test_export_then_import_round_trips(admin_client: Client):
    exported = admin_client.predict(api_name="/export")
    lines = Path(exported).read_text().splitlines()
    assert any('"kind": "article"' in line for line in lines)
    assert admin_client.predict(handle_file(exported), api_name="/import") == f"Imported {len(lines)} records."


def test_import_of_a_bad_file_imports_nothing(admin_client: Client, tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "entry", "question": "q"}\nnot json\n')
    assert admin_client.predict(handle_file(str(bad)), api_name="/import").startswith("Nothing imported: ")


def test_exports_are_not_served_by_the_public_app(server, admin_client: Client):
    admin_client.predict(api_name="/export")
    exported = sorted(server.upload_dir.rglob("helpdesk-*.jsonl"))
    assert exported, "the export should sit in Gradio's upload folder"
    path = exported[-1]
    assert '"kind": "entry"' in path.read_text()
    assert httpx.get(f"{server.url}/gradio_api/file={path}").status_code == 403
    assert httpx.get(f"{server.url}/admin/gradio_api/file={path}").status_code == 401


def test_configured_password_is_never_printed(server):
    log = server.log.read_text()
    assert "Admin login: admin / (the password set in CHATBOT_ADMIN_PASSWORD)" in log
    assert server.admin_password not in log
