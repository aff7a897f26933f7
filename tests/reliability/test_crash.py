"""Crashes: SIGKILL the server while it decodes and while it stores an answer, then restart on the same data.

After every restart the database is sound, the FAISS index holds exactly the database's entries, the answers
stored before the kill are still there and no entry is half-written. Before each restart the index may lag
the database (the row is committed first) but must never be ahead of it.
"""

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from tests.reliability.app_process import (
    INDEX_FILE,
    App,
    StoreState,
    connect_read_only,
    entry_questions,
    kill,
    read_store,
    start,
    stop,
)

pytestmark = pytest.mark.slow

DECODE_TOKENS = 192  # long enough (many forwards) that the decode is still running when its first words arrive
PARTLY_DECODED_TIMEOUT_S = 300  # until the first words of a reply stream; ~2 s alone, far longer on a busy machine
STORE_TOKENS = 16  # short replies: the writes that follow the decode come soon
# When each try kills, on what the server is seen to have written (never on a share of a measured reply time,
# which lands anywhere on a loaded machine): the new entry's row committed (at once, or 10 ms later, between the
# writes that follow), or the question index that holds it saved, before the reply is recorded. Each try's
# questions carry its number, not words: a word in the question can make it one nothing covers, which is handed
# off at once and stores no entry.
KILL_POINTS = [
    pytest.param("row committed", 0.0, 1, id="at-row-commit"),
    pytest.param("row committed", 0.01, 2, id="10ms-after-row-commit"),
    pytest.param("index saved", 0.0, 3, id="at-index-save"),
]


@dataclass
class Attempt:
    """A question sent in a background thread; the result or error arrives in `outcome`."""

    question: str
    thread: threading.Thread
    outcome: dict


def ask_in_background(app: App, question: str) -> Attempt:
    client = Client(f"{app.url}/", verbose=False)
    outcome: dict = {}

    def ask() -> None:
        try:
            outcome["reply"] = client.predict(question, [], api_name="/chat")
        except Exception as err:  # the server is killed under it: any error is the expected outcome
            outcome["error"] = repr(err)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return Attempt(question, thread, outcome)


@contextmanager
def streamed_reply(app: App, question: str) -> Iterator[Iterator[dict]]:
    """Ask as the chat page does, and yield the queue's messages about the reply as they arrive.

    The page's own events run in the browser's order: add_message (unqueued) puts the question in the session,
    then respond joins the queue and streams the reply, one update per decode step, until it is done and stored.
    """
    config = httpx.get(f"{app.url}/config", timeout=30).json()
    events = {dep["api_name"]: dep["id"] for dep in config["dependencies"]}
    session = secrets.token_hex(8)

    def body(event: str, data: list) -> dict:
        return {"data": data, "fn_index": events[event], "session_hash": session, "event_data": None,
                "trigger_id": None, "simple_format": True}  # whole values in every update, not diffs

    # Gradio sends a heartbeat every 15 s on the event stream, so a read that waits longer means a stalled server.
    with httpx.Client(base_url=app.url, timeout=httpx.Timeout(30, read=60)) as http:
        http.post("/gradio_api/run/predict", json=body("add_message", [question, None])).raise_for_status()
        http.post("/gradio_api/queue/join", json=body("respond", [None] * 4)).raise_for_status()
        with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            yield (json.loads(line.removeprefix("data: ")) for line in stream.iter_lines() if line.startswith("data: "))


def reply_text(message: dict) -> str:
    """The assistant's bubble in one of respond's updates ("" before it has one)."""
    bubbles = message["output"]["data"][0] or []
    last = bubbles[-1] if bubbles else {}
    if last.get("role") != "assistant":
        return ""
    content = last["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def wait_until_partly_decoded(messages: Iterator[dict], timeout_s: float = PARTLY_DECODED_TIMEOUT_S) -> str:
    """Read the reply's updates until one shows decoded words of an unfinished reply; return those words."""
    deadline = time.monotonic() + timeout_s
    for message in messages:
        if message.get("msg") == "process_completed":
            raise AssertionError(f"the reply finished before any partial update arrived: {message}")
        text = reply_text(message) if message.get("msg") == "process_generating" else ""
        if text.strip(" …"):  # "…" is the bubble's placeholder before the first token
            return text
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no partly decoded reply streamed within {timeout_s} s")


def messages_after_the_kill(messages: Iterator[dict]) -> list[str]:
    """What the client still heard once the server was killed: the kinds of message, then how the stream ended."""
    heard = []
    try:
        heard += [message.get("msg", "?") for message in messages]
    except httpx.HTTPError as err:  # the killed server closes the stream mid-message
        heard.append(type(err).__name__)
    return heard


def ask(app: App, question: str) -> tuple[str, dict]:
    return Client(f"{app.url}/", verbose=False).predict(question, [], api_name="/chat")


def where_the_kill_landed(before: StoreState, after: StoreState) -> str:
    new_entries = after.entry_ids - before.entry_ids
    if not new_entries:
        return "while decoding (nothing new stored)"
    if not new_entries <= (after.index_ids or set()):
        return "after the entry was committed, before the index was saved"
    if after.reply_ids == before.reply_ids:
        return "after the entry and index were saved, before the reply was recorded"
    return "after the reply was stored"


def dangling_replies(data_dir: Path) -> int:
    with closing(connect_read_only(data_dir)) as db:
        return db.execute(
            "SELECT count(*) FROM replies WHERE entry_id IS NOT NULL AND entry_id NOT IN (SELECT id FROM entries)"
        ).fetchone()[0]


def check_killed_store(data_dir: Path, before: StoreState) -> StoreState:
    """The data as the kill left it, before any restart: sound, and the index never ahead of the rows."""
    state = read_store(data_dir)
    assert state.integrity == "ok" and not state.half_written, state
    assert (state.index_ids or set()) <= state.entry_ids, "the index holds ids that have no row"
    assert before.entry_ids <= state.entry_ids and before.reply_ids <= state.reply_ids
    return state


def check_restarted_store(data_dir: Path, earlier: dict[int, str]) -> StoreState:
    """What the restart-time check must guarantee: every row in the index and nothing else, nothing lost."""
    state = read_store(data_dir)
    assert state.integrity == "ok" and not state.half_written, state
    assert state.index_matches, f"index and database differ by {state.entry_ids ^ (state.index_ids or set())}"
    questions = entry_questions(data_dir)
    assert {entry_id: questions.get(entry_id) for entry_id in earlier} == earlier, "stored answers were lost"
    assert dangling_replies(data_dir) == 0
    return state


class Restarts:
    """The app under test, on one data folder: started when needed, restarted after every kill."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.app, self.max_new_tokens, self.starts = data_dir, None, 0, 0

    def running(self, max_new_tokens: int) -> App:
        if self.app is None or self.app.process.poll() is not None or self.max_new_tokens != max_new_tokens:
            self.close()
            self.app = start(self.data_dir, self.data_dir.parent / "server.log", max_new_tokens=max_new_tokens)
            self.max_new_tokens, self.starts = max_new_tokens, self.starts + 1
        return self.app

    def close(self) -> None:
        if self.app is not None:
            stop(self.app)
            self.app = None


@pytest.fixture(scope="module")
def restarts(tmp_path_factory):
    restarts = Restarts(tmp_path_factory.mktemp("crash") / "data")
    yield restarts
    restarts.close()
    print(f"{restarts.starts} starts of app.py on one data folder")


@pytest.fixture(scope="module")
def earlier() -> dict[int, str]:
    """Entries stored before a kill, by id: they must survive every crash that follows."""
    return {}


def ask_and_remember(app: App, question: str, earlier: dict[int, str]) -> dict:
    _, stats = ask(app, question)
    earlier.update(entry_questions(app.data_dir))
    return stats


def test_kill_while_decoding_loses_only_that_reply(restarts, earlier):
    app = restarts.running(DECODE_TOKENS)
    ask_and_remember(app, "Explain step by step how to set up two-factor authentication.", earlier)
    before = read_store(app.data_dir)
    # A question the help centre covers, so that it is decoded (one nothing covers is handed off at once).
    with streamed_reply(app, "Explain step by step how to restore a file I deleted from the trash.") as messages:
        partial = wait_until_partly_decoded(messages)  # the kill comes once the reply is seen being decoded
        kill(app)
        heard = messages_after_the_kill(messages)
    killed = check_killed_store(app.data_dir, before)
    print(f"killed once {len(partial)} characters of the reply had streamed ({partial[:40]!r}...): "
          f"{where_the_kill_landed(before, killed)}; then the client heard {heard}")
    assert "process_completed" not in heard and killed.entry_ids == before.entry_ids, "the kill came after the reply"
    assert killed.reply_ids == before.reply_ids
    app = restarts.running(STORE_TOKENS)
    check_restarted_store(app.data_dir, earlier)


@pytest.mark.parametrize("kill_after, amount, number", KILL_POINTS)
def test_kill_while_storing_never_splits_index_and_database(restarts, earlier, kill_after, amount, number):
    app = restarts.running(STORE_TOKENS)
    tag = f"#{number}"
    ask_and_remember(app, f"How do I add a member to my team? ({tag})", earlier)
    before, saved = read_store(app.data_dir), index_version(app.data_dir)
    attempt = ask_in_background(app, f"How do I remove a member from my team? ({tag})")
    wait_for_a_new_row(app.data_dir, before)
    if kill_after == "index saved":
        wait_for_a_new_index(app.data_dir, saved)
    time.sleep(amount)
    kill(app)
    how = f"{amount * 1000:.0f} ms after the new entry's {kill_after}"
    attempt.thread.join(timeout=60)
    killed = check_killed_store(app.data_dir, before)
    print(f"killed {how}: {where_the_kill_landed(before, killed)}")
    app = restarts.running(STORE_TOKENS)
    state = check_restarted_store(app.data_dir, earlier)
    assert app.healthy()
    print(f"restarted: {len(state.entry_ids)} entries, all in the index; {len(earlier)} earlier answers kept")


def wait_for_a_new_row(data_dir: Path, before: StoreState, timeout_s: float = 120) -> None:
    """Poll the database (read-only) until the next entry's row is committed."""
    known = max(before.entry_ids, default=0)
    deadline = time.monotonic() + timeout_s
    with closing(connect_read_only(data_dir)) as db:
        while time.monotonic() < deadline:
            if (db.execute("SELECT max(id) FROM entries").fetchone()[0] or 0) > known:
                return
            time.sleep(0.002)
    raise AssertionError(f"no new entry within {timeout_s} s")


def index_version(data_dir: Path) -> tuple[int, int] | None:
    """Which questions.faiss is there: it is saved by renaming a new file over it, so a save changes this."""
    try:
        saved = os.stat(data_dir / INDEX_FILE)
    except FileNotFoundError:
        return None
    return saved.st_ino, saved.st_mtime_ns


def wait_for_a_new_index(data_dir: Path, before: tuple[int, int] | None, timeout_s: float = 120) -> None:
    """Poll the index file's identity (a stat, cheap beside a read) until a save has replaced it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if index_version(data_dir) != before:
            return
        time.sleep(0.002)
    raise AssertionError(f"the question index was not saved within {timeout_s} s")
