"""Two app.py replicas on one PostgreSQL database, as behind a load balancer.

Both start at the same moment on an empty database (so schema creation races), each with its own data
folder and FAISS index. A question answered by replica A is an exact hit on B and a reference for a
paraphrase on B; staff deleting it on A stops B using it; and concurrent chats on both lose no row.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from gradio_client import Client
from sqlalchemy import create_engine, text

from tests.reliability.app_process import App, launch, stop, unexpected_tracebacks, wait_until_up

pytestmark = pytest.mark.slow

PASSWORD = "replica-test-password"
QUESTION = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"
CONCURRENT_QUESTIONS = [
    "How do I cancel my subscription?",
    "Where do deleted files go?",
    "Can I share a folder with someone outside my team?",
    "How much storage does my plan include?",
]
CONCURRENT_WAIT_S = 300  # eight 8-token replies on two servers take seconds; this only bounds a stuck server


@dataclass
class Replicas:
    a: App
    b: App
    db_url: str


@pytest.fixture(scope="module")
def replicas(postgres, tmp_path_factory: pytest.TempPathFactory):
    db_url = postgres.create_database("replicas")
    root = tmp_path_factory.mktemp("replicas")
    apps = []
    for name in ("a", "b"):
        (root / name).mkdir()
        env = {"CHATBOT_DB_URL": db_url, "CHATBOT_ADMIN_PASSWORD": PASSWORD}
        apps.append(launch(root / name / "data", root / name / "server.log", max_new_tokens=8, **env))
    try:
        yield Replicas(wait_until_up(apps[0]), wait_until_up(apps[1]), db_url)
    finally:
        for app in apps:
            stop(app)


def ask(app: App, question: str) -> tuple[str, dict]:
    return Client(f"{app.url}/", verbose=False).predict(question, [], api_name="/chat")


def query(db_url: str, sql: str, **params) -> list[tuple]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    finally:
        engine.dispose()


def entry_of(db_url: str, reply_id: int) -> int:
    [(entry_id,)] = query(db_url, "SELECT entry_id FROM replies WHERE id = :id", id=reply_id)
    return entry_id


def reference_ids(stats: dict) -> list[int]:
    return [reference["id"] for reference in stats["references"]]


def test_an_answer_from_a_is_an_exact_hit_and_a_reference_on_b(replicas: Replicas):
    text_a, stats_a = ask(replicas.a, QUESTION)
    entry_id = entry_of(replicas.db_url, stats_a["reply_id"])
    text_b, stats_b = ask(replicas.b, QUESTION)
    assert stats_b["exact_hit"] is True and text_b == text_a
    _, paraphrased = ask(replicas.b, PARAPHRASE)  # found only through b's own FAISS index, caught up
    assert entry_id in reference_ids(paraphrased)


def test_staff_deleting_on_a_stops_b_using_it(replicas: Replicas):
    _, stats = ask(replicas.a, QUESTION)
    entry_id = entry_of(replicas.db_url, stats["reply_id"])
    admin_a = Client(replicas.a.admin_url, auth=("admin", PASSWORD), verbose=False)
    status = admin_a.predict(entry_id, api_name="/delete_entry")
    assert status == f"Deleted entry #{entry_id}."
    _, after = ask(replicas.b, QUESTION)
    assert after["exact_hit"] is False
    assert entry_id not in reference_ids(after)


def test_concurrent_chats_on_both_replicas_lose_no_row(replicas: Replicas):
    """Each question goes to both replicas at once (the same exact key written twice concurrently), from
    four clients; afterwards the database holds every reply the clients were told about, and one entry
    per question."""
    entries_before = query(replicas.db_url, "SELECT count(*) FROM entries")[0][0]
    replies_before = query(replicas.db_url, "SELECT count(*) FROM replies")[0][0]
    calls = [(app, question) for question in CONCURRENT_QUESTIONS for app in (replicas.a, replicas.b)]
    pool = ThreadPoolExecutor(max_workers=4)
    try:
        results = list(pool.map(lambda call: ask(*call), calls, timeout=CONCURRENT_WAIT_S))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a stuck call fails the test instead of holding it
    told = {stats["reply_id"]: question for (_, question), (_, stats) in zip(calls, results, strict=True)}
    assert len(told) == len(calls)  # every call was told a reply id of its own
    stored = dict(query(replicas.db_url, "SELECT id, question FROM replies WHERE id = ANY(:ids)", ids=list(told)))
    assert stored == told
    assert query(replicas.db_url, "SELECT count(*) FROM replies")[0][0] == replies_before + len(calls)
    # The model's answers: one entry per question (a shipped approved answer to the same question is apart).
    per_question = query(
        replicas.db_url,
        "SELECT question, count(*) FROM entries WHERE question = ANY(:q) AND review <> 'approved' GROUP BY question",
        q=CONCURRENT_QUESTIONS,
    )
    assert sorted(per_question) == sorted((question, 1) for question in CONCURRENT_QUESTIONS)
    # Both replicas started at once on an empty database, and the shipped answers were seeded once.
    seeded = query(replicas.db_url, "SELECT count(*), count(DISTINCT normalized_question) FROM entries "
                   "WHERE review = 'approved'")[0]
    assert seeded[0] == seeded[1] > 0
    assert query(replicas.db_url, "SELECT count(*) FROM entries")[0][0] == entries_before + len(CONCURRENT_QUESTIONS)
    for app in (replicas.a, replicas.b):
        assert unexpected_tracebacks(app.log_text()) == []
