"""The pages in a real Chromium: ask, see the stats, rate, stop, hostile text stays text, the admin page.

Screenshots go to test-artifacts/ (git-ignored).
"""


import pytest
from gradio_client import Client
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from data import example_questions
from webui.widgets import REPLY_COLUMNS

pytestmark = [pytest.mark.slow, pytest.mark.browser]

QUESTION = example_questions()[1]  # "I requested a password reset but the email never arrived. ..."
REPLY_TIMEOUT_MS = 150_000
EVIL_ANSWER = (
    'Reset steps <script>window.__xss = "script"</script> <img src=x onerror="window.__xss = \'img\'"> '
    '[click me](javascript:window.__xss="link")'
)
# A question the help centre covers, so that it is decoded whatever other tests did to the shared server's cache (one
# nothing covers is handed off at once, and then there is nothing to stop).
EVIL_QUESTION = ('<img src=x onerror="window.__xss = 1"> How do I restore a file I deleted from the trash? '
                 "[x](javascript:window.__xss=2)")
LONG_CONTEXT = "Some context: I delete old invoices, photos and shared documents from my trash every day. " * 40
NOTHING_RAN = """() => ({
    xss: window.__xss === undefined ? null : String(window.__xss),
    scripts: document.querySelectorAll('#chat script, #details script, #cache-table script').length,
    handlers: document.querySelectorAll('[onerror], [onload], [onclick]').length,
    js_links: document.querySelectorAll('a[href^="javascript"]').length,
})"""


def new_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    page.goto(url)
    page.locator("#question textarea").wait_for()
    return page


def ask(page, question: str) -> None:
    page.locator("#question textarea").fill(question)
    page.locator("#send").click()


@pytest.fixture(scope="module")
def chat_page(browser, server):
    """A chat page in which the first example question was asked and answered."""
    page = new_page(browser, f"{server.url}/")
    page.get_by_text(QUESTION[:40]).first.click()
    expect(page.locator("#question textarea")).to_have_value(QUESTION)
    page.locator("#send").click()
    page.locator("#chat sub", has_text="forward pass").first.wait_for(timeout=REPLY_TIMEOUT_MS)
    yield page
    page.close()


def entry_rows(admin_client: Client, search: str) -> list[list]:
    table, _ = admin_client.predict(search, "date", True, api_name="/list_entries")
    return table["data"]


def test_reply_has_a_stats_line_and_details(chat_page, artifacts):
    stats = chat_page.locator("#chat sub", has_text="forward pass").first
    line = stats.inner_text()
    for part in ("tokens", " s ·", "tok/s", "speedup", "copied", "forward pass"):
        assert part in line
    assert stats.get_attribute("title").startswith("How the speedup was measured:")
    chat_page.locator("#show-details input").check()
    details = chat_page.locator("#details")
    details.get_by_text("References").wait_for()
    assert "How the speedup was measured" in details.inner_text()
    chat_page.screenshot(path=artifacts / "chat.png", full_page=True)


def test_thumbs_and_reason_are_stored_with_the_reply(chat_page, admin_client):
    chat_page.locator("#chat button[aria-label='Like']").last.click()
    chat_page.get_by_text("Thanks for the feedback").wait_for()
    chat_page.locator("#feedback-reason textarea").fill("clear steps")
    chat_page.locator("#send-reason").click()
    chat_page.get_by_text("your reason was saved").wait_for()
    entry_id = entry_rows(admin_client, QUESTION)[0][0]
    replies = admin_client.predict(entry_id, api_name="/open_entry")[3]["data"]
    feedback = REPLY_COLUMNS.index("feedback")
    assert any(row[feedback] == "up clear steps" for row in replies)


STOP_CLICK_TIMEOUT_MS = 15_000  # the button shows as a reply starts; past this, that reply has ended


def test_stop_keeps_nothing_and_hostile_question_stays_text(browser, server, admin_client):
    # A long question, so the click lands while its prompt is still being prefilled. On a loaded machine a reply can
    # still finish before the click lands (the page then rightly stops nothing): each attempt asks anew, with a
    # marker of its own, until one is stopped.
    for attempt in range(4):
        marker = f"Attempt {attempt} of the stop test."
        page = new_page(browser, f"{server.url}/")
        ask(page, f"{EVIL_QUESTION} {marker} {LONG_CONTEXT}")
        try:
            page.locator("#stop").click(timeout=STOP_CLICK_TIMEOUT_MS)
        except PlaywrightTimeoutError:  # the reply ended while the click was aimed and the button went: ask anew
            pass
        expect(page.locator("#question textarea")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
        assert "<img src=x onerror=" in page.locator("#chat").inner_text()  # shown as typed
        assert page.evaluate(NOTHING_RAN) == {"xss": None, "scripts": 0, "handlers": 0, "js_links": 0}
        stopped = page.get_by_text("Stopped: this reply was not saved").count() == 1
        page.close()
        if stopped:
            assert entry_rows(admin_client, marker) == []
            return
    pytest.fail("every reply finished before the Stop click landed")


def test_empty_question_shows_a_warning_and_stays_out_of_the_chat(browser, server):
    page = new_page(browser, f"{server.url}/")
    ask(page, "   ")
    page.get_by_text("Please type a question.").first.wait_for(timeout=30_000)
    expect(page.locator("#chat [data-testid=user]")).to_have_count(0)
    expect(page.locator("#question textarea")).to_be_enabled()
    page.close()


def test_hostile_cached_answer_is_shown_as_text(browser, server, admin_client, chat_page, artifacts):
    entry_id = entry_rows(admin_client, QUESTION)[0][0]
    assert admin_client.predict(entry_id, QUESTION, EVIL_ANSWER, api_name="/edit_entry") == f"Saved entry #{entry_id}."
    page = new_page(browser, f"{server.url}/")
    page.locator("#show-details input").check()
    # A rewording, so the edited entry comes back as a reference (an exact repeat would be re-verified by the
    # model and the entry healed back to the model's own answer before it is shown).
    ask(page, QUESTION + " Thanks!")
    page.locator("#chat sub", has_text="forward pass").first.wait_for(timeout=REPLY_TIMEOUT_MS)
    page.locator("#details").get_by_text(f"#{entry_id}").wait_for()
    assert '<script>window.__xss = "script"</script>' in page.locator("#details").inner_text()
    assert page.evaluate(NOTHING_RAN) == {"xss": None, "scripts": 0, "handlers": 0, "js_links": 0}
    page.screenshot(path=artifacts / "chat-hostile-cached-answer.png", full_page=True)
    page.close()


def admin_page(browser, server):
    """The admin page, logged in."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(server.admin_url)
    page.locator("input[type=password]").wait_for()
    assert page.locator("#cache-table").count() == 0  # nothing of the admin page before the login
    page.locator("input[type=text]").fill(server.admin_user)
    page.locator("input[type=password]").fill(server.admin_password)
    page.keyboard.press("Enter")
    page.locator("#cache-table").wait_for(timeout=30_000)
    return page


def entry_review(admin_client, question: str, entry_id: int) -> str:
    table, _ = admin_client.predict(question[:30], "date", True, "all", api_name="/list_entries")
    return next(row[1] for row in table["data"] if row[0] == entry_id)


def test_admin_page_after_login(browser, server, artifacts):
    page = admin_page(browser, server)
    cell = page.locator("#cache-table").get_by_text(QUESTION[:30]).filter(visible=True).first
    cell.wait_for(timeout=30_000)
    cell.click()
    page.get_by_text("can change only speed, never what the bot answers").wait_for()
    page.locator("#entry-status").get_by_text("Entry #").wait_for()
    assert page.evaluate(NOTHING_RAN)["xss"] is None
    page.screenshot(path=artifacts / "admin-cache.png", full_page=True)
    page.get_by_role("tab", name="Dashboard").click()
    page.locator("#dashboard-summary").get_by_text("Replies served").wait_for(timeout=30_000)
    page.locator("#dashboard-summary").get_by_text("Replies no approved answer backed").wait_for()
    page.locator("#dashboard-unbacked").locator("img").wait_for()  # staff's list of questions to write answers for
    page.screenshot(path=artifacts / "admin-dashboard.png", full_page=True)
    page.close()


def test_staff_approve_filter_and_bulk_reject_on_the_admin_page(browser, server, admin_client, chat_page, artifacts):
    """The review state changes through the page itself: approve one entry, find it by state, reject in bulk."""
    page = admin_page(browser, server)
    cell = page.locator("#cache-table").get_by_text(QUESTION[:30]).filter(visible=True).first
    cell.wait_for(timeout=30_000)
    cell.click()
    status = page.locator("#entry-status").get_by_text("(candidate)")
    status.wait_for()
    entry_id = int(status.inner_text().split("#")[1].split(" ")[0])
    page.locator("#entry-approve").click()
    page.locator("#entry-status").get_by_text(f"Entry #{entry_id} is now approved.").wait_for()
    assert entry_review(admin_client, QUESTION, entry_id) == "approved"

    page.locator("#review-filter input").click()
    page.get_by_role("option", name="approved", exact=True).click()
    page.get_by_text("entries (approved)").wait_for()
    table = page.locator("#cache-table")
    expect(table.get_by_text("candidate", exact=True).filter(visible=True)).to_have_count(0)
    expect(table.get_by_text("approved", exact=True).filter(visible=True).first).to_be_visible()
    page.screenshot(path=artifacts / "admin-review-filter.png", full_page=True)

    page.locator("#bulk-ids textarea").fill(f"{entry_id}, 999999")
    page.locator("#bulk-reject").click()
    page.locator("#bulk-status").get_by_text("Rejected 1 entry (1 of the ids name no entry).").wait_for()
    assert entry_review(admin_client, QUESTION, entry_id) == "rejected"
    page.locator("#bulk-ids textarea").fill("3-x")
    page.locator("#bulk-reject").click()
    page.locator("#bulk-status").get_by_text("Not an entry id or range").wait_for()
    page.close()


def test_wordings_and_merge_on_the_admin_page(browser, server, admin_client, chat_client, artifacts):
    """Staff attach a wording to an approved answer, merge another entry into it and remove a wording, on the
    page itself; the wordings table follows, the merged entry is gone, and each change is in the history."""
    kept_id = next(row[0] for row in entry_rows(admin_client, "How do I reset my password") if row[1] == "approved")
    merged_question = "Can I rename a folder that I shared with my team?"
    chat_client.predict(merged_question, [], api_name="/chat")
    merged_id = entry_rows(admin_client, merged_question)[0][0]
    page = admin_page(browser, server)
    page.locator("#entry-id input").fill(str(kept_id))
    page.get_by_role("button", name="Open", exact=True).click()
    page.locator("#entry-status").get_by_text(f"Entry #{kept_id} (approved)").wait_for(timeout=30_000)
    wordings = page.locator("#wording-table")

    page.locator("#new-wording textarea").fill("pw reset pls, locked out")
    page.locator("#add-wording").click()
    page.locator("#wording-status").get_by_text("Added wording #").wait_for()
    wordings.get_by_text("pw reset pls, locked out").filter(visible=True).first.wait_for()

    page.locator("#merge-id input").fill(str(merged_id))
    page.locator("#merge-entry").click()
    page.locator("#wording-status").get_by_text(f"Merged entry #{merged_id} into #{kept_id}").wait_for()
    wordings.get_by_text(merged_question).filter(visible=True).first.wait_for()
    assert all(row[0] != merged_id for row in entry_rows(admin_client, merged_question))
    page.screenshot(path=artifacts / "admin-wordings.png", full_page=True)

    wordings.get_by_text("pw reset pls, locked out").filter(visible=True).first.click()
    # The row click fills the id on a round trip; removing before it lands removes nothing (a failure seen once
    # on a loaded machine, 2026-12-02).
    expect(page.locator("#wording-id input")).not_to_have_value("0")
    page.locator("#remove-wording").click()
    page.locator("#wording-status").get_by_text("Removed wording #").wait_for()
    expect(wordings.get_by_text("pw reset pls, locked out").filter(visible=True)).to_have_count(0)
    expect(wordings.get_by_text(merged_question).filter(visible=True).first).to_be_visible()
    history = admin_client.predict(kept_id, api_name="/open_entry")[4]["data"]
    assert [row[3] for row in history][:3] == ["wording_remove", "merge", "wording_add"]
    page.close()
