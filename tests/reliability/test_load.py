"""Load: 8 chat sessions at once, 2 questions each, against one server whose replies share forwards.

Every reply arrives, each is stored with its own session's question and history, the database holds every
reply, the log shows no lock errors, and the FAISS index agrees with the database afterwards.
"""

import threading
import time
from dataclasses import dataclass, field
from functools import partial

import pytest
from gradio_client import Client

from tests.reliability.app_process import App, read_store, replies_table, unexpected_tracebacks
from tests.threads import results_at_once

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 120  # for all sessions' clients to connect before they ask at once
SESSIONS_WAIT_S = 600  # 16 short replies sharing forwards take a minute or two on 2 busy cores
MARKERS = ["Amber", "Birch", "Cobalt", "Dune", "Ember", "Fjord", "Garnet", "Harbor"]  # one per session
TOPICS = [  # the second is asked with the first's history
    "How do I reset my password?",
    "Can I share a folder with someone outside my team?",
]


@dataclass
class Turn:
    question: str
    history: list[dict]  # what the session sent with the question
    text: str
    stats: dict


@dataclass
class Session:
    marker: str
    session_hash: str = ""
    turns: list[Turn] = field(default_factory=list)


def run_session(url: str, marker: str, start: threading.Barrier) -> Session:
    """One user: a client of its own, a question per topic, each sent with this session's own history."""
    client = Client(f"{url}/", verbose=False)
    session, history = Session(marker, client.session_hash), []
    start.wait(timeout=START_TIMEOUT_S)  # if a client failed to connect, the others give up instead of waiting forever
    for topic in TOPICS:
        question = f"This is customer {marker}. {topic}"
        text, stats = client.predict(question, history, api_name="/chat")
        session.turns.append(Turn(question, list(history), text, stats))
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": text}]
    return session


@pytest.fixture(scope="module")
def load_run(server: App):
    """The sessions' results, the reply count before, the log before, and the seconds it all took."""
    before = read_store(server.data_dir)
    log_start = len(server.log_text())
    start = threading.Barrier(len(MARKERS))
    started = time.perf_counter()
    sessions = results_at_once([partial(run_session, server.url, marker, start) for marker in MARKERS],
                               SESSIONS_WAIT_S)
    seconds = time.perf_counter() - started
    print(f"{len(MARKERS)} sessions x {len(TOPICS)} questions answered in {seconds:.0f} s")
    return sessions, before, log_start


def test_every_reply_arrives_and_is_stored(server, load_run):
    sessions, before, _ = load_run
    turns = [turn for session in sessions for turn in session.turns]
    reply_ids = {turn.stats["reply_id"] for turn in turns}
    asked = len(MARKERS) * len(TOPICS)
    assert len(turns) == asked and all(turn.text.strip() for turn in turns) and len(reply_ids) == asked
    after = read_store(server.data_dir)
    print(f"replies {len(before.reply_ids)} -> {len(after.reply_ids)}, entries {len(before.entry_ids)} -> "
          f"{len(after.entry_ids)}")
    assert reply_ids <= after.reply_ids and len(after.reply_ids) == len(before.reply_ids) + asked
    assert len(after.entry_ids) == len(before.entry_ids) + asked  # different questions, each decoded once


def test_each_session_kept_its_own_conversation(server, load_run):
    sessions, _, _ = load_run
    stored = replies_table(server.data_dir)
    assert len({session.session_hash for session in sessions}) == len(sessions)
    for session in sessions:
        others = [marker for marker in MARKERS if marker != session.marker]
        for turn in session.turns:
            reply = stored[turn.stats["reply_id"]]
            assert reply["question"] == turn.question and reply["answer"] == turn.text
            assert reply["history"] == turn.history, f"{session.marker}: stored with another history"
            assert reply["session_id"] == session.session_hash
            assert not [m for m in others if m in turn.text], f"{session.marker} saw: {turn.text!r}"


def test_replies_under_load_equal_plain_decoding(load_run, admin_client):
    """Concurrent replies share forwards, and sharing must not change a bit: Verify reruns every reply alone."""
    sessions, _, _ = load_run
    turns = [turn for session in sessions for turn in session.turns]
    assert max(turn.stats["shared_with"] for turn in turns) > 0, "no reply shared a forward: nothing was tested"
    for turn in turns:
        reply_id = turn.stats["reply_id"]
        verdict = admin_client.predict(reply_id, api_name="/verify")
        assert f"Reply {reply_id}: identical to step-by-step decoding" in verdict, verdict


def test_store_agrees_and_nothing_was_locked(server, load_run):
    _, _, log_start = load_run
    log = server.log_text()[log_start:]
    assert "database is locked" not in log.lower()
    assert not unexpected_tracebacks(log), unexpected_tracebacks(log)
    state = read_store(server.data_dir)
    assert state.integrity == "ok" and not state.half_written
    assert state.index_matches, (state.entry_ids ^ (state.index_ids or set()))
