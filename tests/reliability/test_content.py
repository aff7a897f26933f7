"""Hostile content in cached questions, answers and articles is shown as text, never run, in the chat and on
the admin page; SQL in a question is plain text; an edited cached answer is never served as the bot's answer.

The hostile records go in through the admin import (JSON Lines), as an admin restoring a tampered export would.
"""

import json
import re
from contextlib import closing
from pathlib import Path

import pytest
from gradio_client import handle_file
from playwright.sync_api import expect
from transformers import AutoTokenizer

from tests.reliability.app_process import REPO, connect_read_only, entry_questions, read_store, replies_table

pytestmark = pytest.mark.slow

REPLY_TIMEOUT_MS = 180_000
MODEL_ID = "SmolLM2-135M-Instruct"
PAYLOADS = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    "[click](javascript:window.__pwned=1)",
    "<svg onload=\"alert('pwned')\"></svg>",  # would open a dialog
]
EXACT_QUESTION = "How do I change the email address on my account?"
REFERENCE_QUESTION = "Can I send a fax from Nimbus Drive?"  # close to every hostile entry below
# The model answers it word for word (its wording chosen so: "Please echo: ..." stopped being echoed once prompts
# attended through the lane kernel, whose last bits differ from SDPA's).
ECHO_QUESTION = "Echo this text back to me: <script>window.__pwned=1</script>"
# The help centre's steps with the payloads between them, so that the source checks let it ground (an answer
# that says nothing of the question would not: chatbot/relevance.py).
HOSTILE_ANSWER = (f"To change the email address on your account: {PAYLOADS[0]}\n1. Open Settings > Account > Email "
                  f"address and click Change. {PAYLOADS[1]}\n2. Enter the new address and your current password. "
                  f"{PAYLOADS[2]}\n3. Enter the 6-digit confirmation code we send to the new address. {PAYLOADS[3]}")
# Words of SQL the help centre never uses weigh nothing in the source check, so this is still a question about
# deleting an account, decoded and stored.
SQL_QUESTION = "how do I delete my account?' OR '1'='1'; --"
NOTHING_RAN = """() => ({
    pwned: window.__pwned === undefined ? null : String(window.__pwned),
    scripts: document.querySelectorAll('#chat script, #details script, #cache-table script, #article-table script')
        .length,
    handlers: document.querySelectorAll('[onerror], [onload], [onclick]').length,
    js_links: document.querySelectorAll('a[href^="javascript"]').length,
})"""
BOT_BUBBLES = "#chat [data-testid='bot']"
CLEAN = {"pwned": None, "scripts": 0, "handlers": 0, "js_links": 0}


def entry_texts(data_dir: Path) -> list[tuple[str, str]]:
    with closing(connect_read_only(data_dir)) as db:
        return db.execute("SELECT question, answer FROM entries").fetchall()


def hostile_records() -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(REPO / "models" / MODEL_ID)
    records = []
    for payload in PAYLOADS:
        answer = f"To send a fax: {payload} open Settings, then Fax, and press Send."
        records.append({
            "kind": "entry", "question": f"How do I send a fax from Nimbus Drive? {payload}", "answer": answer,
            "answer_ids": [*tokenizer(answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id],
            "model_id": MODEL_ID,
        })
    records.append({
        "kind": "article", "id": "fax-help", "title": f"{PAYLOADS[1]} Faxing from Nimbus Drive",
        "body": f"Nimbus Drive can send a document as a fax. {PAYLOADS[0]} Open the file, choose Share, then Fax.",
    })
    return records


def chat(client, question: str) -> tuple[str, dict]:
    return client.predict(question, [], api_name="/chat")


@pytest.fixture(scope="module")
def imported(admin_client, tmp_path_factory) -> int:
    path = tmp_path_factory.mktemp("import") / "hostile.jsonl"
    records = hostile_records()
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert admin_client.predict(handle_file(str(path)), api_name="/import") == f"Imported {len(records)} records."
    return len(records)


def test_edited_cached_answer_is_never_served_as_the_bots_answer(server, chat_client, admin_client):
    """What the admin page promises: an edit approves the answer, which then guides replies from the prompt,
    yet every reply stays the model's greedy reply to its prompt; a rejected answer changes only speed."""
    original, stats = chat(chat_client, EXACT_QUESTION)
    entry_id = replies_table(server.data_dir, {stats["reply_id"]})[stats["reply_id"]]["entry_id"]
    saved = admin_client.predict(entry_id, EXACT_QUESTION, HOSTILE_ANSWER, api_name="/edit_entry")
    assert saved == f"Saved entry #{entry_id}."
    guided, stats = chat(chat_client, EXACT_QUESTION)
    print(f"after editing entry #{entry_id}: exact_hit={stats['exact_hit']}, reply={guided[:80]!r}")
    assert not stats["exact_hit"], "the approved edit changed the prompt: no stale exact hit may serve it"
    assert entry_id in [use["id"] for use in stats["grounding"]]
    assert "identical to step-by-step decoding" in admin_client.predict(stats["reply_id"], api_name="/verify")
    assert admin_client.predict(str(entry_id), "rejected", api_name="/review_entries") == "Rejected 1 entry."
    text, stats = chat(chat_client, EXACT_QUESTION)
    print(f"after rejecting entry #{entry_id}: exact_hit={stats['exact_hit']}, reply={text[:80]!r}")
    assert stats["grounding"] == [] and stats["exact_hit"]  # the edited text was drafted and checked
    assert text == original, "an exact repeat served the rejected cache entry instead of the model's answer"


def test_sql_in_a_question_is_stored_and_searched_as_text(server, chat_client, admin_client):
    entries_before = len(read_store(server.data_dir).entry_ids)
    text, stats = chat(chat_client, SQL_QUESTION)
    assert text.strip() and stats["reply_id"]
    table, info = admin_client.predict("' OR '1'='1'; --", "date", True, api_name="/list_entries")
    print(f"admin search for the SQL text: {info}; rows: {[row[2] for row in table['data']]}")
    assert [row[2] for row in table["data"]] == [SQL_QUESTION]
    assert SQL_QUESTION in entry_questions(server.data_dir).values()
    assert len(read_store(server.data_dir).entry_ids) == entries_before + 1
    texts = [question + "\n" + answer for question, answer in entry_texts(server.data_dir)]
    for wildcard in ("%", "_", "[a-z]"):  # LIKE and GLOB wildcards match themselves only
        info = admin_client.predict(wildcard, "date", True, api_name="/list_entries")[1]
        found = int(re.search(r"(\d+) entries", info).group(1))
        assert found == sum(wildcard in text for text in texts), (wildcard, info)


def open_page(browser, url: str, dialogs: list[str]):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    return page


@pytest.fixture(scope="module")
def chat_page(browser, server, imported):
    """The chat with details shown, after a reply that echoes HTML and a question near the hostile imports."""
    dialogs: list[str] = []
    page = open_page(browser, f"{server.url}/", dialogs)
    page.locator("#question textarea").wait_for()
    page.locator("#show-details input").check()
    # The echo question second: asked first, nothing would cover it and the app would hand it off undecoded (its
    # conversation is something to go on, so it is decoded).
    for number, question in enumerate((REFERENCE_QUESTION, ECHO_QUESTION)):
        page.locator("#question textarea").fill(question)
        page.locator("#send").click()
        page.locator("#chat sub", has_text="forward pass").nth(number).wait_for(timeout=REPLY_TIMEOUT_MS)
    # The stats line shows while a reply streams; it is stored (and its details filled) once it is done.
    for _ in range(REPLY_TIMEOUT_MS // 500):
        if any(r["question"] == ECHO_QUESTION for r in replies_table(server.data_dir).values()):
            break
        page.wait_for_timeout(500)
    yield page, dialogs
    page.close()


def visible_cell(table, text: str):
    """A table cell showing `text` (the Dataframe also keeps hidden copies of its cells)."""
    return table.get_by_text(text).filter(visible=True).first


def click_around(page, scope: str) -> None:
    """Click every link and every message bubble in `scope`, as a curious user would."""
    for link in page.locator(f"{scope} a").all():
        if link.is_visible():
            link.click(no_wait_after=True)
    for text in ("click", "Echo this text", "To send a fax"):
        for element in page.locator(scope).get_by_text(text).all():
            if element.is_visible():
                element.click(no_wait_after=True)
    page.wait_for_timeout(500)


def echo_reply(server) -> str:
    """The stored reply to the echo question (in bf16 the model echoes its HTML; in fp32 it did not)."""
    return next(r["answer"] for r in replies_table(server.data_dir).values() if r["question"] == ECHO_QUESTION)


@pytest.mark.browser
def test_hostile_references_show_as_text_in_the_chat(server, chat_page):
    page, dialogs = chat_page
    page.locator(BOT_BUBBLES).first.click()  # shows the first reply's details: the fax question's references
    page.locator("#details").get_by_text("How do I send a fax from Nimbus Drive?").first.wait_for(
        timeout=REPLY_TIMEOUT_MS)
    details = page.locator("#details").inner_text()
    print(f"details panel: {details[:600]!r}")
    assert "How do I send a fax from Nimbus Drive? <script>window.__pwned=1</script>" in details
    assert 'To send a fax: <img src=x onerror="window.__pwned=1">' in details
    assert "[click](javascript:window.__pwned=1)" in details
    click_around(page, "#chat")
    page.locator(BOT_BUBBLES).nth(1).click()  # shows the second reply's details: the reply that echoed HTML
    if "<script>" in echo_reply(server):  # only a reply that echoed the HTML has it to show
        # the test server's short replies end within the echo: its HTML as typed, not the whole question
        expect(page.locator("#details")).to_contain_text("<script>window.__pwned", use_inner_text=True,
                                                         timeout=30_000)
    assert page.evaluate(NOTHING_RAN) == CLEAN and dialogs == []


@pytest.mark.browser
def test_html_in_a_reply_shows_as_text_in_its_bubble(server, chat_page):
    """The model's own reply can hold HTML (here it echoes the question); its bubble must show it as typed."""
    page, dialogs = chat_page
    served = echo_reply(server)
    bubble = page.locator(BOT_BUBBLES).nth(1).inner_text()
    print(f"served: {served!r}; bubble shows: {bubble[:200]!r}")
    assert page.evaluate(NOTHING_RAN) == CLEAN and dialogs == []
    if "<script>" not in served:
        pytest.skip("the model did not echo the HTML this time, so there is nothing to show as text")
    assert served in bubble, "the reply's HTML was not shown as typed"


@pytest.mark.browser
def test_hostile_entries_and_articles_show_as_text_on_the_admin_page(browser, server, admin_password, imported):
    dialogs: list[str] = []
    page = open_page(browser, server.admin_url, dialogs)
    page.locator("input[type=password]").wait_for()
    page.locator("input[type=text]").fill("admin")
    page.locator("input[type=password]").fill(admin_password)
    page.keyboard.press("Enter")
    page.locator("#cache-search textarea").fill("send a fax")
    page.locator("#cache-search textarea").press("Enter")
    table = page.locator("#cache-table")
    for payload in PAYLOADS:
        expect(table).to_contain_text(payload, use_inner_text=True, timeout=60_000)
    visible_cell(table, "How do I send a fax").click()
    page.locator("#entry-status").get_by_text("Entry #").wait_for(timeout=30_000)
    assert "How do I send a fax" in page.locator("#entry-question textarea").input_value()
    page.get_by_role("tab", name="Knowledge base").click()
    articles = page.locator("#article-table")
    expect(articles).to_contain_text(f"{PAYLOADS[1]} Faxing from Nimbus Drive", use_inner_text=True, timeout=30_000)
    visible_cell(articles, "Faxing from Nimbus Drive").click()
    expect(page.locator("#article-body textarea")).to_have_value(re.compile("Nimbus Drive can send"), timeout=30_000)
    page.wait_for_timeout(1000)
    result = page.evaluate(NOTHING_RAN)
    print(f"admin page after clicking the hostile rows: {result}, dialogs: {dialogs}")
    assert result == CLEAN and dialogs == []
    page.close()
