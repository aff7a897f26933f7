"""Access: every admin function needs the admin login, the public app reaches no admin function, and the
password made up when none is configured is random.

The admin functions are enumerated from the admin app's own config (read with the login), so a handler
added later is covered without editing this file.
"""

import json
import secrets
from collections.abc import Iterator
from contextlib import closing, contextmanager

import httpx
import pytest

from tests.reliability.app_process import connect_read_only

pytestmark = pytest.mark.slow

FIXED_PASSWORDS = {"admin", "password", "changeme", "secret", "helpdesk", "nimbus", "123456", ""}
SESSION = "outsider-session"


def predict_body(fn_index: int) -> dict:
    return {"data": [None], "fn_index": fn_index, "session_hash": SESSION, "event_data": None, "trigger_id": None}


@contextmanager
def logged_in(url: str, password: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/admin/login", data={"username": "admin", "password": password})
        assert response.status_code == 200, response.text
        yield client


@pytest.fixture(scope="module")
def admin_functions(server, admin_password) -> list[tuple[int, str, str]]:
    """(fn_index, api_name, visibility) of every event of the admin app, private UI plumbing included."""
    with logged_in(server.url, admin_password) as client:
        config = client.get("/admin/config").json()
    functions = [(dep["id"], dep["api_name"], dep["api_visibility"]) for dep in config["dependencies"]]
    print(f"{len(functions)} admin events: {[name for _, name, _ in functions]}")
    assert {"verify", "edit_entry", "delete_entry", "import", "export", "save_article"} <= {f[1] for f in functions}
    return functions


def outsiders(server, admin_password: str) -> dict[str, httpx.Client]:
    """Clients without a valid admin login: none, a refused login, and cookies forged after the real ones."""
    failed = httpx.Client(base_url=server.url, timeout=30)
    assert failed.post("/admin/login", data={"username": "admin", "password": "not-it"}).status_code == 400
    assert not failed.cookies, "a refused login must not set a cookie"
    with logged_in(server.url, admin_password) as real:
        names = list(real.cookies.keys())
    forged = httpx.Client(base_url=server.url, timeout=30, cookies={name: secrets.token_urlsafe(16) for name in names})
    other_user = httpx.Client(base_url=server.url, timeout=30)
    assert other_user.post("/admin/login", data={"username": "root", "password": admin_password}).status_code == 400
    return {"no login": httpx.Client(base_url=server.url, timeout=30), "wrong password": failed,
            "forged cookie": forged, "right password, wrong user": other_user}


def requests_for(admin_functions: list[tuple[int, str, str]]) -> list[tuple[str, str, dict | None]]:
    """Every way to run an admin event over HTTP: the queue by fn_index, and the REST routes by api_name."""
    pages = ("/admin/config", "/admin/gradio_api/info", "/admin/gradio_api/queue/data")
    requests = [("GET", path, None) for path in pages]
    for fn_index, api_name, visibility in admin_functions:
        requests.append(("POST", "/admin/gradio_api/queue/join", predict_body(fn_index)))
        if visibility == "public":
            requests += [
                ("POST", f"/admin/gradio_api/call/{api_name}", {"data": [None]}),
                ("POST", f"/admin/gradio_api/run/{api_name}", predict_body(fn_index)),
                ("POST", f"/admin/gradio_api/api/{api_name}", predict_body(fn_index)),
            ]
    return requests


def test_every_admin_function_refuses_requests_without_the_login(server, admin_password, admin_functions):
    refused, let_through = 0, []
    for who, client in outsiders(server, admin_password).items():
        for method, path, body in requests_for(admin_functions):
            status = client.request(method, path, json=body).status_code
            refused += status == 401
            if status != 401:
                let_through.append(f"{who}: {method} {path} -> {status}")
        client.close()
    print(f"{refused} admin requests without a valid login refused with 401")
    assert not let_through, let_through


def test_the_same_routes_work_with_the_login(server, admin_password, admin_functions):
    """The control for the test above: the paths are right, so 401 there really means 'not logged in'."""
    fn_index = next(i for i, name, _ in admin_functions if name == "list_articles")
    with logged_in(server.url, admin_password) as client:
        assert client.post("/admin/gradio_api/call/list_articles", json={"data": []}).status_code == 200
        assert client.post("/admin/gradio_api/queue/join", json=predict_body(fn_index)).status_code == 200
        assert "/verify" in client.get("/admin/gradio_api/info").json()["named_endpoints"]


def test_public_app_reaches_no_admin_function(server, chat_client, admin_functions):
    api = chat_client.view_api(return_format="dict", print_info=False)
    assert list(api["named_endpoints"]) == ["/chat"] and not api["unnamed_endpoints"]
    public = httpx.get(f"{server.url}/config", timeout=30).json()["dependencies"]
    admin_names = {name for _, name, visibility in admin_functions if visibility == "public"}
    assert not admin_names & {dep["api_name"] for dep in public}
    reached = []
    for name in sorted(admin_names):
        for path in (f"/gradio_api/call/{name}", f"/gradio_api/run/{name}"):
            response = httpx.post(f"{server.url}{path}", json={"data": [None]}, timeout=30)
            if response.status_code < 400:
                reached.append(f"POST {path} -> {response.status_code} {response.text[:100]}")
    # The admin events' fn_index numbers name other functions (or none) in the public app's list.
    print(f"public functions: {[(dep['id'], dep['api_name']) for dep in public]}")
    assert not reached, reached


def run_queued(url: str, fn_index: int, data: list, event_data: dict | None = None) -> dict:
    """Run one event of the Gradio app at `url` as a browser would (queue/join, then its event stream)."""
    session = secrets.token_hex(8)
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": event_data, "trigger_id": None}
    joined = httpx.post(f"{url}/gradio_api/queue/join", json=body, timeout=30)
    assert joined.status_code == 200, joined.text
    with httpx.stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session}, timeout=60) as events:
        for line in events.iter_lines():
            message = json.loads(line.removeprefix("data: ")) if line.startswith("data: ") else {}
            if message.get("msg") == "process_completed":
                return message
    raise AssertionError("the event stream ended without a result")


def test_feedback_events_cannot_be_aimed_at_other_sessions_replies(server, chat_client):
    """The chat page's private feedback events read the reply id from server-side session state; a raw
    request that sends a forged state must not set feedback on a reply of another session."""
    _, stats = chat_client.predict("How do I reset my password?", [], api_name="/chat")
    reply_id = stats["reply_id"]
    config = httpx.get(f"{server.url}/config", timeout=30).json()
    public = {dep["api_name"]: dep["id"] for dep in config["dependencies"]}
    forged_rating = {"reply_id": reply_id, "value": -1}
    forged_replies = {"0": {"reply_id": reply_id, "details": ""}}
    thumbs_down_on_bubble_0 = {"index": 0, "value": "x", "liked": False}
    outcomes = [
        run_queued(server.url, public["send_reason"], [forged_rating, "forged reason"]),
        run_queued(server.url, public["rate"], [forged_replies, "forged reason"], thumbs_down_on_bubble_0),
    ]
    print(f"forged feedback events answered: {[(o['success'], o['output'].get('data')) for o in outcomes]}")
    with closing(connect_read_only(server.data_dir)) as db:
        feedback = db.execute("SELECT feedback, feedback_reason FROM replies WHERE id = ?", (reply_id,)).fetchone()
    assert feedback == (None, ""), f"reply {reply_id} got feedback from another session: {feedback}"


def test_generated_admin_password_is_random(servers, admin_password):
    second = servers.second_password
    print(f"two starts printed passwords of {len(admin_password)} and {len(second)} characters")
    for password in (admin_password, second):
        assert password not in FIXED_PASSWORDS and len(password) >= 16
        assert len(set(password)) >= 10, "a random password uses many different characters"
    assert admin_password != second
