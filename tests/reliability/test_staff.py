"""Staff accounts, roles, the audit trail, login throttling, idle sessions and overload on a real `app.py`.

The server is this module's own: short lockouts and idle time keep the waits short, the chat line is small,
and the per-address chat limit is off because every test client is 127.0.0.1. Each test logs in with accounts
of its own, and the throttle test, whose failures lock names and its address, logs in from an address of its
own (127.0.0.2): no test meets a lockout another left, so none waits one out. Every wait polls for what it
waits for (a lockout lifted, a session unused for longer than the idle setting) and has a deadline; nothing
here asserts how long anything took.
"""

import json
import subprocess
import sys
import time
from contextlib import closing

import httpx
import pytest
from argon2 import PasswordHasher
from gradio_client import Client, handle_file

from tests.reliability.app_process import REPO, App, connect_read_only, read_store, replies_table, start, stop

pytestmark = pytest.mark.slow

ADMIN, ADMIN_PW = "admin", "bootstrap-admin-pw"
AGENT, AGENT_PW = "agent1", "agent-one-password"
LOCKOUT_S, IDLE_S, MAX_FAILURES = 2, 8, 3
SETTINGS = {
    "CHATBOT_ADMIN_PASSWORD": ADMIN_PW, "CHATBOT_LOGIN_MAX_FAILURES": str(MAX_FAILURES),
    "CHATBOT_LOGIN_LOCKOUT_S": str(LOCKOUT_S), "CHATBOT_LOGIN_LOCKOUT_MAX_S": "30", "CHATBOT_ADMIN_IDLE_S": str(IDLE_S),
    "CHATBOT_CHAT_QUEUE_SIZE": "4", "CHATBOT_CHAT_PER_CLIENT": "1", "CHATBOT_CHAT_PER_ADDRESS": "0",
}
REFUSALS = ("busy right now", "already have")
TIMEOUT_S = 120  # a login runs argon2; on a busy shared machine that can take longer than httpx's 5 s default
POLL_S = 0.5  # between polls of a lockout, and between uses of a session kept active
LOCKOUT_SLACK_S = 30  # how long past the announced Retry-After a lockout may last before the test fails
THROTTLED_ADDRESS = "127.0.0.2"  # the throttle test's own: Linux routes all of 127.0.0.0/8 to the loopback
REPLY_TIMEOUT_S = 600  # for one chat reply while a flood of others is queued on 2 busy cores


def users_cli(app: App, *args: str, password: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chatbot.users", "--data-dir", str(app.data_dir), *args],
        cwd=REPO, input=password and password + "\n", capture_output=True, text=True, check=True,
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> App:
    root = tmp_path_factory.mktemp("staff")
    running = start(root / "data", root / "server.log", **SETTINGS)
    try:
        users_cli(running, "add", AGENT, "--role", "agent", "--password-stdin", password=AGENT_PW)
        yield running
    finally:
        stop(running)


def new_account(app: App, name: str, role: str = "agent") -> tuple[str, str]:
    """A staff account for one test alone: (name, password)."""
    password = f"{name}-password"
    users_cli(app, "add", name, "--role", role, "--password-stdin", password=password)
    return name, password


def login_once_unlocked(app: App, name: str, password: str, client: httpx.Client) -> httpx.Response:
    """One login attempt, tried again while it is refused as locked out, until the lockout lifts, within the
    announced Retry-After plus slack. A refusal while locked counts as no failure (webui/auth.py), so trying
    again changes nothing but the audit log's "locked" rows."""
    response = try_login(app, name, password, client)
    if response.status_code != 429:
        return response
    announced = int(response.headers["retry-after"])
    deadline = time.monotonic() + announced + LOCKOUT_SLACK_S
    while response.status_code == 429:
        assert time.monotonic() < deadline, f"{name} still locked out {LOCKOUT_SLACK_S} s past Retry-After {announced}"
        time.sleep(POLL_S)
        response = try_login(app, name, password, client)
    return response


def try_login(app: App, name: str, password: str, client: httpx.Client | None = None) -> httpx.Response:
    """One login attempt, taking a refusal as it comes."""
    return (client or httpx).post(
        f"{app.url}/admin/login", data={"username": name, "password": password}, timeout=TIMEOUT_S
    )


def chat_client(app: App) -> Client:
    return Client(f"{app.url}/", verbose=False, httpx_kwargs={"timeout": TIMEOUT_S})


def staff_client(app: App, name: str, password: str) -> Client:
    assert try_login(app, name, password).status_code == 200
    return Client(app.admin_url, auth=(name, password), verbose=False, httpx_kwargs={"timeout": TIMEOUT_S})


def audit_rows(app: App) -> list[dict]:
    with closing(connect_read_only(app.data_dir)) as db:
        rows = db.execute("SELECT id, actor, action, entry_id, target, details FROM audit_log ORDER BY id").fetchall()
    keys = ("id", "actor", "action", "entry_id", "target", "details")
    return [dict(zip(keys, (*r[:5], json.loads(r[5])), strict=True)) for r in rows]


@pytest.fixture(scope="module")
def entry_id(app: App) -> int:
    chat = chat_client(app)
    _, stats = chat.predict("How do I reset my password?", [], api_name="/chat")
    return replies_table(app.data_dir)[stats["reply_id"]]["entry_id"]


def test_password_hashes_are_argon2_and_never_the_password(app):
    with closing(connect_read_only(app.data_dir)) as db:
        hashes = dict(db.execute("SELECT name, password_hash FROM staff_users").fetchall())
    assert {ADMIN, AGENT} <= set(hashes)  # and the accounts other tests made, if they ran first
    assert all(stored.startswith("$argon2id$") for stored in hashes.values())
    for name, password in ((ADMIN, ADMIN_PW), (AGENT, AGENT_PW)):
        assert password not in hashes[name]
        assert PasswordHasher().verify(hashes[name], password)
    assert "Admin login: admin / (the password set in CHATBOT_ADMIN_PASSWORD)" in app.log_text()


def test_an_agent_cannot_approve_delete_import_or_manage_users_through_any_route(app, entry_id, tmp_path):
    name, password = new_account(app, "refused-agent")
    agent = staff_client(app, name, password)
    proposal = agent.predict(entry_id, "Reset my password?", "Use the reset link.", api_name="/propose_edit")
    assert proposal.startswith("Proposed edit #")
    proposal_id = int(proposal.split("#")[1].split()[0])
    upload = tmp_path / "import.jsonl"
    upload.write_text(json.dumps({"kind": "article", "id": "evil", "title": "Evil", "body": "Evil."}) + "\n")
    attempts = {
        "/edit_entry": (entry_id, "q", "a"), "/delete_entry": (entry_id,), "/import": (handle_file(str(upload)),),
        "/export": (), "/save_article": ("evil", "Evil", "Evil."), "/delete_article": ("reset-password",),
        "/apply_proposal": (proposal_id,), "/dismiss_proposal": (proposal_id,),
        "/add_user": ("eve", "admin", "eve-password"), "/reset_password": (ADMIN, "taken-over-pw"),
        "/set_role": (name, "admin"), "/remove_user": (ADMIN,), "/list_users": (), "/audit": ("", "", None),
        "/export_audit": ("", "", None),
    }
    denied_before = sum(r["action"] == "denied" for r in audit_rows(app))
    for api_name, args in attempts.items():
        with pytest.raises(Exception, match="Only an admin") as refused:
            agent.predict(*args, api_name=api_name)
        print(f"{api_name}: {refused.value}")
    # The REST route too, with the agent's own login cookie.
    with httpx.Client(base_url=app.url, timeout=TIMEOUT_S) as raw:
        assert try_login(app, name, password, raw).status_code == 200
        event = raw.post("/admin/gradio_api/call/delete_entry", json={"data": [entry_id]}).json()["event_id"]
        outcome = raw.get(f"/admin/gradio_api/call/delete_entry/{event}").text
    assert "event: error" in outcome and "Only an admin" in outcome
    rows = audit_rows(app)
    denied = [r for r in rows if r["action"] == "denied"][denied_before:]
    assert len(denied) == len(attempts) + 1 and {r["actor"] for r in denied} == {name}
    assert entry_id in read_store(app.data_dir).entry_ids
    with closing(connect_read_only(app.data_dir)) as db:
        roles = dict(db.execute("SELECT name, role FROM staff_users").fetchall())
        assert db.execute("SELECT count(*) FROM articles WHERE id = 'evil'").fetchone()[0] == 0
    assert (roles[ADMIN], roles[name], "eve" in roles) == ("admin", "agent", False)


def test_every_action_leaves_exactly_one_audit_row_with_the_right_person(app, entry_id):
    # Each step logs in afresh: this module's sessions expire after IDLE_S unused, and a slow step (the import
    # re-embeds the cache) on a slow CPU outlasted it (401 on the next call, AMD EPYC with AVX2 only).
    admin_name, admin_pw = new_account(app, "auditing-admin", "admin")
    agent_name, agent_pw = new_account(app, "audited-agent")
    password = {admin_name: admin_pw, agent_name: agent_pw}
    export_path = staff_client(app, admin_name, admin_pw).predict(api_name="/export")
    steps = [
        (admin_name, "/edit_entry", (entry_id, "How do I reset my password?", "Open Settings, then Security."),
         "edit"),
        (agent_name, "/propose_edit", (entry_id, "Password reset?", "Use the link in the email."), "propose"),
        (admin_name, "/save_article", ("printing", "Printing", "Press Print."), "article_save"),
        (admin_name, "/delete_article", ("printing",), "article_delete"),
        (admin_name, "/export", (), "export"),
        (admin_name, "/import", (handle_file(export_path),), "import"),
        (admin_name, "/add_user", ("nina", "agent", "nina-password"), "user_add"),
        (admin_name, "/reset_password", ("nina", "nina-password-2"), "user_reset"),
        (admin_name, "/set_role", ("nina", "admin"), "user_role"),
        (admin_name, "/remove_user", ("nina",), "user_remove"),
    ]
    for name, api_name, args, action in steps:
        client = staff_client(app, name, password[name])
        before = audit_rows(app)
        client.predict(*args, api_name=api_name)
        after = audit_rows(app)
        assert len(after) == len(before) + 1, f"{api_name}: {after[len(before):]}"
        assert (after[-1]["action"], after[-1]["actor"]) == (action, name), api_name
    admin = staff_client(app, admin_name, admin_pw)
    proposal_id = [r for r in audit_rows(app) if r["action"] == "propose"][-1]["details"]["proposal_id"]
    current = admin.predict(entry_id, api_name="/open_entry")[1]  # the import above restored the exported answer
    before = audit_rows(app)
    assert admin.predict(proposal_id, api_name="/apply_proposal").startswith("Applied")
    applied = audit_rows(app)[len(before):]
    assert [(r["action"], r["actor"], r["entry_id"]) for r in applied] == [("edit", admin_name, entry_id)]
    assert applied[0]["details"]["before"]["answer"] == current
    assert applied[0]["details"]["after"]["answer"] == "Use the link in the email."
    before = audit_rows(app)
    assert admin.predict(entry_id, api_name="/delete_entry").startswith("Deleted")  # the button is not output
    assert [(r["action"], r["actor"]) for r in audit_rows(app)[len(before):]] == [("delete", admin_name)]
    history = admin.predict(entry_id, api_name="/open_entry")[4]["data"]
    assert [row[3] for row in history][:3] == ["delete", "edit", "propose"], history
    shown = admin.predict(agent_name, "propose", None, api_name="/audit")["data"]
    assert shown and {(row[2], row[3]) for row in shown} == {(agent_name, "propose")}
    exported = admin.predict("", "", entry_id, api_name="/export_audit")
    lines = [json.loads(line) for line in open(exported, encoding="utf-8")]
    assert [r["action"] for r in lines] == [r["action"] for r in audit_rows(app) if r["entry_id"] == entry_id]


def test_logins_are_audited_and_wrong_passwords_are_throttled_until_the_lockout_passes(app):
    name, password = new_account(app, "throttled")
    # From an address of its own, which the lockouts below lock too: the other tests' logins never meet them.
    with httpx.Client(transport=httpx.HTTPTransport(local_address=THROTTLED_ADDRESS), timeout=TIMEOUT_S) as own:
        assert try_login(app, name, password, own).status_code == 200  # nothing locked yet: in at once
        before = len(audit_rows(app))
        for _ in range(MAX_FAILURES):
            assert try_login(app, name, "wrong-password", own).status_code == 400
        refused = try_login(app, name, password, own)
        assert refused.status_code == 429 and "Too many failed logins" in refused.json()["detail"]
        first_wait = int(refused.headers["retry-after"])
        rows = audit_rows(app)[before:]
        assert [(r["actor"], r["action"]) for r in rows] == [(name, "login_failed")] * (MAX_FAILURES + 1)
        assert rows[-1]["details"]["reason"] == "locked" and rows[0]["details"]["address"] == THROTTLED_ADDRESS
        assert login_once_unlocked(app, name, password, own).status_code == 200  # once the lockout has passed
        assert audit_rows(app)[-1]["action"] == "login"
        for _ in range(MAX_FAILURES):  # the address's count goes on: the next lockout is longer
            try_login(app, "someone", "wrong-password", own)
        again = try_login(app, name, password, own)
        assert again.status_code == 429 and int(again.headers["retry-after"]) > first_wait
        assert login_once_unlocked(app, name, password, own).status_code == 200  # this lockout passes too


def test_an_idle_session_must_log_in_again_and_an_active_one_stays(app):
    name, password = new_account(app, "idle-admin", "admin")
    with (
        httpx.Client(base_url=app.url, timeout=TIMEOUT_S) as idle,
        httpx.Client(base_url=app.url, timeout=TIMEOUT_S) as active,
    ):
        assert try_login(app, name, password, idle).status_code == 200
        assert try_login(app, name, password, active).status_code == 200
        assert idle.get("/admin/config").status_code == 200
        idle_since = time.monotonic()  # the server saw the idle session last before this
        uses = 0
        # The active session is used every POLL_S until the other has gone unused for longer than IDLE_S: in use
        # for longer than the idle time, never idle that long.
        while time.monotonic() - idle_since <= IDLE_S + POLL_S:
            assert active.get("/admin/config").status_code == 200, f"the active session was dropped after {uses} uses"
            uses += 1
            time.sleep(POLL_S)
        assert idle.get("/admin/config").status_code == 401
        assert idle.post("/admin/gradio_api/call/list_articles", json={"data": []}).status_code == 401
        assert active.get("/admin/config").status_code == 200


def test_a_flood_from_one_client_is_refused_while_another_client_is_answered(app):
    flood, other = chat_client(app), chat_client(app)
    before = read_store(app.data_dir).reply_ids
    questions = [f"Flood question {i}: how do I add a user number {i} to my team?" for i in range(10)]
    jobs = [flood.submit(q, [], api_name="/chat") for q in questions]
    other_answers = [
        other.submit(q, [], api_name="/chat").result(timeout=REPLY_TIMEOUT_S)
        for q in ("Customer B: where do deleted files go?", "Customer B: how do I cancel my subscription?")
    ]
    answered, refused = {}, []
    for question, job in zip(questions, jobs, strict=True):
        try:
            answered[question] = job.result(timeout=REPLY_TIMEOUT_S)
        except Exception as err:  # gradio_client raises the server's gr.Error as an AppError
            refused.append((question, str(err)))
    print(f"flood: {len(answered)} answered, {len(refused)} refused: {refused[:1]}")
    assert len(other_answers) == 2 and all(text.strip() for text, _ in other_answers)
    assert refused and all(any(r in message for r in REFUSALS) for _, message in refused)
    told_stored = {stats["reply_id"] for _, stats in [*answered.values(), *other_answers]}
    stored = replies_table(app.data_dir)
    new = read_store(app.data_dir).reply_ids - before
    assert new == told_stored  # every answered question stored, nothing else
    stored_questions = {stored[i]["question"] for i in new}
    assert not {q for q, _ in refused} & stored_questions


def log_in_page(browser, app: App, name: str, password: str):
    """A fresh browser context logged in through Gradio's own login form."""
    page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    page.goto(app.admin_url)
    page.locator("input[type=password]").wait_for(timeout=60_000)
    page.locator("input:not([type=password])").first.fill(name)
    page.locator("input[type=password]").fill(password)
    page.get_by_role("button", name="Login").click()
    page.locator("#who").get_by_text(f"Logged in as {name}").wait_for(timeout=60_000)
    return page


@pytest.mark.browser
def test_in_the_browser_an_agent_is_refused_a_delete_and_the_admin_sees_it_in_the_audit_log(app, browser):
    _, stats = chat_client(app).predict("Explain step by step how to restore a file I deleted.", [], api_name="/chat")
    entry = replies_table(app.data_dir)[stats["reply_id"]]["entry_id"]
    agent_name, agent_password = new_account(app, "agent-in-browser")
    admin_name, admin_password = new_account(app, "admin-in-browser", "admin")
    agent = log_in_page(browser, app, agent_name, agent_password)
    assert "(agent)" in agent.locator("#who").inner_text()
    agent.locator("#entry-id input").fill(str(entry))
    agent.get_by_role("button", name="Open", exact=True).click()
    agent.locator("#entry-status").get_by_text(f"Entry #{entry}").wait_for(timeout=60_000)
    agent.get_by_role("button", name="Delete entry").click()
    agent.get_by_role("button", name="Really delete?").click()
    agent.get_by_text("Only an admin may do this (delete)").first.wait_for(timeout=60_000)
    assert entry in read_store(app.data_dir).entry_ids
    admin = log_in_page(browser, app, admin_name, admin_password)
    admin.get_by_role("tab", name="Audit log").click()
    admin.locator("#audit-actor input, #audit-actor textarea").first.fill(agent_name)
    admin.locator("#audit-show").click()
    # A Gradio table keeps hidden copies of its cells: only a shown one is what the admin sees.
    admin.locator("#audit-table").get_by_text("denied").filter(visible=True).first.wait_for(timeout=60_000)
    admin.screenshot(path=str(app.data_dir.parent / "audit.png"), full_page=True)
