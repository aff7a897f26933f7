"""Two caches on one database, each with its own index folder, as two app replicas run: they stay in step."""

import threading

from cache_helpers import answer, run_at_once

from cache import AnswerCache
from cache.staff import StaffStore

PASSWORD = "How do I reset my password?"
PARAPHRASE = "I forgot my password, how can I change it?"
INVOICES = "Where can I download my invoices?"
WAIT_S = 120.0  # four replicas open and write in seconds; this only bounds a deadlock


def open_pair(open_cache, tmp_path) -> tuple[AnswerCache, AnswerCache]:
    """Replica a and replica b: separate data folders, a's database shared."""
    return open_cache(tmp_path / "a"), open_cache(tmp_path / "b", store=tmp_path / "a")


def test_an_answer_stored_by_one_replica_is_found_by_the_other(open_cache, tmp_path):
    a, b = open_pair(open_cache, tmp_path)
    entry_id = a.add_answer(answer(PASSWORD, "Use the link."))
    assert [hit.id for hit in b.lookup(PARAPHRASE, threshold=0.5)] == [entry_id]
    assert b.find_exact(PASSWORD, "", "model-a", "").answer == "Use the link."


def test_a_delete_on_one_replica_stops_the_other_using_it(open_cache, tmp_path):
    a, b = open_pair(open_cache, tmp_path)
    gone = a.add_answer(answer(PASSWORD))
    kept = a.add_answer(answer(PASSWORD + " I am locked out"))
    assert {hit.id for hit in b.lookup(PASSWORD, threshold=-1)} == {gone, kept}
    assert a.delete_entry(gone)
    assert [hit.id for hit in b.lookup(PASSWORD, threshold=-1)] == [kept]
    assert indexed_ids(b) == {kept}  # dropped from b's own index too, not only filtered out


def test_an_edit_on_one_replica_reaches_the_other(open_cache, tmp_path):
    a, b = open_pair(open_cache, tmp_path)
    entry_id = a.add_answer(answer(INVOICES))
    assert b.lookup(PARAPHRASE, threshold=0.5) == []
    a.update_entry(entry_id, question=PASSWORD, answer="new", answer_ids=[7])
    hits = b.lookup(PARAPHRASE, threshold=0.5)
    assert [(hit.id, hit.answer, hit.answer_ids) for hit in hits] == [(entry_id, "new", [7])]


def test_articles_written_and_deleted_on_one_replica_reach_the_other(open_cache, tmp_path):
    a, b = open_pair(open_cache, tmp_path)
    a.upsert_article("reset", "Resetting your password", "Choose 'Forgot password' on the sign-in page.")
    assert b.best_article(PARAPHRASE).id == "reset"
    a.delete_article("reset")
    assert b.best_article(PARAPHRASE, threshold=-1) is None


def test_a_replica_reopened_after_missing_changes_replays_them(open_cache, tmp_path):
    a, b = open_pair(open_cache, tmp_path)
    moved = a.add_answer(answer(INVOICES))
    b.lookup(INVOICES)  # b catches up on a's answer...
    own = b.add_answer(answer("How do I delete my account?"))  # ...and saves it with its own
    b.close()  # b is down while a edits the question: b's saved index still holds the old vector
    a.update_entry(moved, question=PASSWORD)
    reopened = open_cache(tmp_path / "b", store=tmp_path / "a")
    assert [hit.id for hit in reopened.lookup(PARAPHRASE, k=1, threshold=0.5)] == [moved]
    assert indexed_ids(reopened) == {moved, own}


def test_replicas_opening_at_once_and_writing_at_once_lose_nothing(open_cache, tmp_path):
    """Four replicas start together on a new database (schema created once), then all write the same and
    their own questions concurrently: every own question is stored once, each shared one exactly once."""
    replicas: list[AnswerCache] = [None] * 4
    errors: list[Exception] = []

    def run(number: int) -> None:
        try:
            replicas[number] = cache = open_cache(tmp_path / f"r{number}", store=tmp_path / "shared")
            for n in range(6):
                cache.add_answer(answer(f"Question {n} from replica {number}?"))
                cache.add_answer(answer(f"Shared question {n}?", f"from replica {number}"))
        except Exception as error:  # any failure (duplicate table, deadlock, ...) fails the test below
            errors.append(error)

    run_at_once(run, 4, WAIT_S, "writing")
    assert errors == []
    questions = sorted(entry.question for entry in replicas[0].list_entries(limit=100).entries)
    expected = [f"Question {n} from replica {r}?" for r in range(4) for n in range(6)]
    assert questions == sorted(expected + [f"Shared question {n}?" for n in range(6)])
    stored_ids = {entry.id for entry in replicas[0].list_entries(limit=100).entries}
    for replica in replicas:
        replica.lookup(PASSWORD)  # catch up
        assert indexed_ids(replica) == stored_ids


def test_replicas_creating_the_staff_tables_at_once_on_a_new_database_all_start(store_url, tmp_path):
    """app.py opens the staff tables first thing; two replicas started together once both ran CREATE TABLE and
    one failed (PostgreSQL's duplicate pg_type row). They take the startup lock as the cache's schema does."""
    url = store_url(tmp_path / "shared")
    stores: list[StaffStore] = []
    errors: list[Exception] = []
    start = threading.Barrier(4, timeout=WAIT_S)

    def open_store(number: int) -> None:
        try:
            start.wait()
            stores.append(StaffStore.open(tmp_path / f"r{number}", url))
        except Exception as error:
            errors.append(error)

    run_at_once(open_store, 4, WAIT_S, "opening")
    try:
        assert errors == [] and len(stores) == 4
    finally:
        for store in stores:
            store.close()


def indexed_ids(cache: AnswerCache) -> set[int]:
    """The ids in a cache's in-memory index (what its lookups search), not its saved file."""
    return cache._backend.index.ids()
