"""Adding, finding and administering cached answers, with the real embedder, on SQLite and PostgreSQL."""


import pytest
from cache_helpers import answer, run_at_once

from cache import AnswerCache, VectorIndex
from cache.store import INDEX_FILE

PASSWORD = "How do I reset my password?"
PARAPHRASE = "I forgot my password, how can I change it?"
UNRELATED = "What is your refund policy for annual plans?"
WAIT_S = 120.0  # 80 writes take seconds; this only bounds a deadlock


def index_ids(cache_dir) -> set[int]:
    return VectorIndex.load(cache_dir / INDEX_FILE, 384).ids()


def all_ids(cache: AnswerCache) -> set[int]:
    return {entry.id for entry in cache.list_entries(limit=10_000).entries}


def test_lookup_ranks_a_paraphrase_above_an_unrelated_question(cache):
    password_id = cache.add_answer(answer(PASSWORD, "Use the 'Forgot password' link."))
    refund_id = cache.add_answer(answer(UNRELATED, "Refunds within 30 days."))
    hits = cache.lookup(PARAPHRASE, k=2, threshold=-1.0)
    assert [hit.id for hit in hits] == [password_id, refund_id]
    assert hits[0].score > hits[1].score
    assert hits[0].answer == "Use the 'Forgot password' link." and hits[0].answer_ids == [1, 2, 3]


def test_threshold_drops_weak_matches(cache):
    cache.add_answer(answer(PASSWORD))
    cache.add_answer(answer(UNRELATED))
    hits = cache.lookup(PARAPHRASE, k=4, threshold=0.5)
    assert [hit.question for hit in hits] == [PASSWORD]
    assert cache.lookup("Which cheese goes with red wine?", threshold=0.5) == []


def test_lookup_can_keep_one_model_and_skip_ids(cache):
    other_model = cache.add_answer(answer(PASSWORD, model_id="model-b"))
    same_model = cache.add_answer(answer(PASSWORD + " Please help", model_id="model-a"))
    assert [hit.id for hit in cache.lookup(PARAPHRASE, threshold=0.3, model_id="model-a")] == [same_model]
    assert other_model not in {hit.id for hit in cache.lookup(PARAPHRASE, exclude_ids=[other_model])}


def test_lookup_validates_its_arguments(cache):
    with pytest.raises(ValueError, match="k must be"):
        cache.lookup(PASSWORD, k=0)
    with pytest.raises(ValueError, match="threshold"):
        cache.lookup(PASSWORD, threshold=1.5)
    with pytest.raises(ValueError, match="threshold"):
        cache.best_article(PASSWORD, threshold=-2)


def test_find_exact_matches_the_normalized_question_and_counts_hits(cache):
    entry_id = cache.add_answer(answer(PASSWORD, context_key="ctx", prompt_hash="p1"))
    found = cache.find_exact("  how do I reset my PASSWORD ", "ctx", "model-a", "p1")
    assert found is not None and found.id == entry_id and found.hits == 1
    assert found.created_at.tzinfo is not None
    assert cache.find_exact(PASSWORD, "other ctx", "model-a", "p1") is None
    assert cache.find_exact(PASSWORD, "ctx", "model-b", "p1") is None
    assert cache.find_exact(PASSWORD, "ctx", "model-a", "p2") is None
    assert cache.get_entry(entry_id).hits == 1


def test_adding_the_same_exact_key_updates_instead_of_duplicating(cache):
    first = cache.add_answer(answer(PASSWORD, "old answer"))
    second = cache.add_answer(answer(PASSWORD.upper(), "new answer"))
    assert first == second
    assert cache.get_entry(first).answer == "new answer"
    assert cache.list_entries().total == 1


def test_eviction_removes_the_least_used_then_oldest_and_keeps_the_index_in_step(open_cache, tmp_path):
    cache = open_cache(max_entries=3)
    hit = cache.add_answer(answer("How do I reset my password?"))
    used = cache.add_answer(answer("How do I change my email address?"))
    idle = cache.add_answer(answer("Where can I download my invoices?"))
    cache.find_exact("How do I reset my password?", "", "model-a", "")
    cache.mark_used([used])
    newest = cache.add_answer(answer("How do I delete my account?"))
    assert all_ids(cache) == {hit, used, newest}
    assert index_ids(tmp_path / "data") == {hit, used, newest}
    assert idle not in {h.id for h in cache.lookup("Where can I download my invoices?", threshold=-1)}


def test_concurrent_writers_keep_rows_and_index_equal(cache, tmp_path):
    errors = []

    def write(worker: int) -> None:
        try:
            for n in range(10):
                cache.add_answer(answer(f"Question {n} from worker {worker}?"))
        except Exception as error:  # any failure, e.g. "database is locked", fails the test below
            errors.append(error)

    run_at_once(write, 8, WAIT_S, "writing")
    assert errors == []
    assert len(all_ids(cache)) == 80
    assert index_ids(tmp_path / "data") == all_ids(cache)


def test_sql_in_questions_and_searches_is_plain_text(cache):
    injection = "'; DROP TABLE entries; --"
    entry_id = cache.add_answer(answer(injection, "100% of 5_000"))
    cache.add_answer(answer(PASSWORD, "plain"))
    page = cache.list_entries(search=injection)
    assert [entry.id for entry in page.entries] == [entry_id] and page.total == 1
    assert cache.get_entry(entry_id).question == injection
    assert [e.id for e in cache.list_entries(search="%").entries] == [entry_id]  # a literal %, not a wildcard
    assert [e.id for e in cache.list_entries(search="_").entries] == [entry_id]
    assert cache.list_entries(search="PLAIN").total == 1


def test_list_entries_sorts_and_pages(cache):
    slow = cache.add_answer(answer("Question one?", speedup=1.2))
    fast = cache.add_answer(answer("Question two?", speedup=3.0))
    unmeasured = cache.add_answer(answer("Question three?"))
    cache.find_exact("Question one?", "", "model-a", "")
    cache.mark_used([fast, fast])

    def ids(**options):
        return [entry.id for entry in cache.list_entries(**options).entries]

    assert ids(sort="speedup") == [fast, slow, unmeasured]
    assert ids(sort="speedup", descending=False) == [slow, fast, unmeasured]
    assert ids(sort="hits")[0] == slow
    assert ids(sort="uses")[0] == fast
    assert ids(sort="date") == [unmeasured, fast, slow]
    page = cache.list_entries(sort="date", limit=1, offset=1)
    assert [e.id for e in page.entries] == [fast] and page.total == 3
    with pytest.raises(ValueError, match="sort"):
        cache.list_entries(sort="id; DROP TABLE entries")
    with pytest.raises(ValueError, match="limit"):
        cache.list_entries(limit=0)


def test_update_entry_reembeds_a_new_question(cache):
    entry_id = cache.add_answer(answer(UNRELATED))
    updated = cache.update_entry(entry_id, question=PASSWORD, answer="new", answer_ids=[7])
    assert (updated.question, updated.answer, updated.answer_ids) == (PASSWORD, "new", [7])
    assert [hit.id for hit in cache.lookup(PARAPHRASE, threshold=0.5)] == [entry_id]
    assert cache.lookup(UNRELATED, threshold=0.6) == []
    assert cache.find_exact(PASSWORD, "", "model-a", "").id == entry_id


def test_update_entry_rejects_unknown_ids_and_untokenized_answers(cache):
    entry_id = cache.add_answer(answer(PASSWORD))
    with pytest.raises(ValueError, match="answer_ids"):
        cache.update_entry(entry_id, answer="text without token ids")
    with pytest.raises(KeyError):
        cache.update_entry(entry_id + 100, question="?")


def test_delete_entry_removes_it_from_lookups_and_the_index(cache, tmp_path):
    entry_id = cache.add_answer(answer(PASSWORD))
    assert cache.delete_entry(entry_id) is True
    assert cache.delete_entry(entry_id) is False
    assert cache.get_entry(entry_id) is None
    assert cache.lookup(PASSWORD, threshold=-1) == []
    assert index_ids(tmp_path / "data") == set()


def test_open_validates_its_arguments(embedder, tmp_path):
    with pytest.raises(ValueError, match="max_entries"):
        AnswerCache.open(tmp_path, embedder.embed, embedder.dim, max_entries=0)
