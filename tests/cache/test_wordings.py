"""Wordings (aliases): an entry answers every wording staff confirmed, on every replica; suggestions match
nothing until confirmed; merging moves a question over; the hybrid match adds BM25 for approved entries."""

from collections.abc import Callable

import pytest
from cache_helpers import answer

from cache import NewReply
from cache.index_sync import WORDINGS_FILE

PASSWORD = "How do I reset my password?"
LOCKED_OUT = "I can't get into my account, the sign-in page keeps refusing me"
INVOICES = "Where can I download my invoices?"


def entry_ids(hits) -> list[int]:
    return [hit.id for hit in hits]


def test_a_confirmed_wording_makes_its_entry_match_by_that_wording(cache):
    entry_id = cache.add_answer(answer(PASSWORD))
    before = cache.lookup(LOCKED_OUT, k=1, threshold=-1)[0].score
    wording = cache.add_wording(entry_id, LOCKED_OUT + ".", created_by="alice")
    [hit] = cache.lookup(LOCKED_OUT, k=1, threshold=-1)
    assert (hit.id, hit.wording) == (entry_id, LOCKED_OUT + ".")
    assert (wording.status, wording.created_by) == ("confirmed", "alice")
    assert hit.score > before and hit.score > 0.95
    assert cache.add_wording(entry_id, LOCKED_OUT + ".") is None  # already there
    assert cache.add_wording(entry_id, "how do i reset my password") is None  # the entry's own question


def test_a_suggested_wording_matches_nothing_until_staff_confirm_it(cache):
    entry_id = cache.add_answer(answer(PASSWORD))
    suggested = cache.suggest_wording(entry_id, LOCKED_OUT)
    assert suggested.status == "suggested"
    assert cache.lookup(LOCKED_OUT, k=1, threshold=0.9) == []
    assert [s.wording.id for s in cache.suggested_wordings()] == [suggested.id]
    assert [w.id for w in cache.confirm_wordings([suggested.id, 999])] == [suggested.id]
    assert entry_ids(cache.lookup(LOCKED_OUT, k=1, threshold=0.9)) == [entry_id]
    assert cache.suggested_wordings() == []
    assert [w.id for w in cache.remove_wordings([suggested.id])] == [suggested.id]
    assert cache.lookup(LOCKED_OUT, k=1, threshold=0.9) == []
    assert cache.wordings(entry_id) == []


def test_merging_moves_the_question_wordings_and_replies_and_deletes_the_merged_entry(cache):
    kept = cache.add_answer(answer(PASSWORD, "Use the link."))
    merged = cache.add_answer(answer(LOCKED_OUT, "Try again later."))
    cache.add_wording(merged, "sign in refused")
    reply = cache.record_reply(NewReply(question=LOCKED_OUT, answer="Try again later.", entry_id=merged))
    result = cache.merge_entries(kept, merged, actor="alice")
    assert (result.moved_wordings, result.moved_replies) == (2, 1)
    assert cache.get_entry(merged) is None
    assert cache.get_reply(reply).entry_id == kept
    assert sorted(w.question for w in cache.wordings(kept)) == sorted([LOCKED_OUT, "sign in refused"])
    [hit] = cache.lookup(LOCKED_OUT, k=1, threshold=-1)
    assert (hit.id, hit.answer, hit.score > 0.99) == (kept, "Use the link.", True)
    with pytest.raises(ValueError):
        cache.merge_entries(kept, kept)
    with pytest.raises(KeyError):
        cache.merge_entries(kept, merged)


def test_wordings_and_merges_on_one_replica_reach_the_other(open_cache, tmp_path):
    a, b = open_cache(tmp_path / "a"), open_cache(tmp_path / "b", store=tmp_path / "a")
    kept = a.add_answer(answer(PASSWORD))
    other = a.add_answer(answer(INVOICES))
    assert entry_ids(b.lookup(LOCKED_OUT, k=1, threshold=0.9)) == []
    a.add_wording(kept, LOCKED_OUT)
    assert entry_ids(b.lookup(LOCKED_OUT, k=1, threshold=0.9)) == [kept]
    a.merge_entries(kept, other)
    assert entry_ids(b.lookup(INVOICES, k=2, threshold=0.9)) == [kept]
    a.delete_entry(kept)
    assert b.lookup(LOCKED_OUT, k=1, threshold=-1) == []


def test_a_reopened_replica_keeps_its_wordings_and_rebuilds_a_lost_wordings_file(open_cache, tmp_path):
    first = open_cache()
    entry_id = first.add_answer(answer(PASSWORD))
    first.add_wording(entry_id, LOCKED_OUT)
    first.close()
    assert entry_ids(open_cache().lookup(LOCKED_OUT, k=1, threshold=0.9)) == [entry_id]
    (tmp_path / "data" / WORDINGS_FILE).unlink()  # a crash after the row, before the index file
    assert entry_ids(open_cache().lookup(LOCKED_OUT, k=1, threshold=0.9)) == [entry_id]


def test_the_hybrid_match_adds_bm25_for_approved_entries_only(cache):
    approved = cache.add_answer(answer("How do I download an invoice as a PDF?", review="approved"))
    candidate = cache.add_answer(answer("Can I get my invoice in PDF form?"))
    dense_only = cache.match("invoice pdf", k=2, reviews=("approved", "candidate"), lexical_weight=0.0)
    hybrid = cache.match("invoice pdf", k=2, reviews=("approved", "candidate"), lexical_weight=0.5)
    by_id = {hit.id: hit for hit in hybrid}
    assert all(hit.score == hit.dense for hit in dense_only)
    assert by_id[approved].lexical > 0 and by_id[approved].score > by_id[approved].dense
    assert by_id[candidate].lexical == 0 and by_id[candidate].score == by_id[candidate].dense
    # Approving the other entry reaches the lexical index through the change log.
    cache.set_review([candidate], "approved")
    assert {hit.id: hit.lexical > 0 for hit in cache.match("invoice pdf", k=2, lexical_weight=0.5)} == {
        approved: True, candidate: True,
    }


def test_matching_answers_scores_an_approved_entry_by_its_answer_where_that_is_closer(cache):
    sync = "My files do not show up on my other computer"
    approved = cache.add_answer(answer("Why is my desktop app not syncing?", review="approved",
                                       text="If your files do not show up on your other computer, pause and resume "
                                            "sync from the tray icon, then check that both computers are online."))
    [by_question] = cache.match(sync, k=1)
    [by_answer] = cache.match(sync, k=1, match_answers=True)
    assert by_question.id == by_answer.id == approved
    assert by_answer.score > by_question.score and by_answer.wording == "(its answer)"
    cache.update_entry(approved, answer="Restart the app.", answer_ids=[4])  # an edit is embedded afresh
    assert cache.match(sync, k=1, match_answers=True)[0].score < by_answer.score


def test_confirmed_wordings_travel_with_an_export_and_suggestions_do_not(open_cache, tmp_path):
    source = open_cache(tmp_path / "a")
    entry_id = source.add_answer(answer(PASSWORD, review="approved"))
    source.add_wording(entry_id, LOCKED_OUT)
    source.suggest_wording(entry_id, INVOICES)
    source.export_jsonl(tmp_path / "export.jsonl")
    target = open_cache(tmp_path / "b")
    target.import_jsonl(tmp_path / "export.jsonl")
    [imported] = target.list_entries().entries
    assert [(w.question, w.status) for w in target.wordings(imported.id)] == [(LOCKED_OUT, "confirmed")]
    assert entry_ids(target.lookup(LOCKED_OUT, k=1, threshold=0.9)) == [imported.id]


def counting_embed(embedder) -> tuple[Callable[[list[str]], object], list[list[str]]]:
    """The real embedder, and the texts of each call it gets."""
    calls: list[list[str]] = []

    def embed(texts: list[str]):
        calls.append(list(texts))
        return embedder.embed(texts)

    return embed, calls


def test_warming_embeds_the_approved_answers_before_the_first_match(open_cache, embedder):
    embed, calls = counting_embed(embedder)
    cache = open_cache(embed=embed)
    reset = "Use the reset link on the sign-in page."
    cache.add_answer(answer(PASSWORD, reset, review="approved"))
    cache.warm_match(match_answers=True, lexical=True)
    assert [reset] in calls
    calls.clear()
    cache.match(PASSWORD, k=1, match_answers=True, lexical_weight=0.5)  # the question's vector is memoized
    assert calls == []


def test_interleaved_turns_embed_each_question_once(open_cache, embedder):
    """Several customers' turns interleave (article, match, references, storing): each question is embedded once,
    not once per look-up whenever another customer's question came in between."""
    embed, calls = counting_embed(embedder)
    cache = open_cache(embed=embed)
    cache.add_answer(answer(PASSWORD, "Use the reset link on the sign-in page.", review="approved"))
    cache.warm_match(match_answers=True, lexical=True)
    calls.clear()
    for _ in range(2):  # two customers taking turns at each look-up
        for question in (LOCKED_OUT, "How do I share a folder?"):
            cache.best_article(question, threshold=0.0)
            cache.match(question, k=1, match_answers=True, lexical_weight=0.5)
            cache.lookup(question, k=2, threshold=0.0)
    assert sorted(calls) == sorted([[LOCKED_OUT], ["How do I share a folder?"]])


def test_remembered_question_vectors_are_shared_read_only_and_the_oldest_go_first(embedder):
    from cache.vectors import REMEMBERED_QUESTIONS, Embedding

    embed, calls = counting_embed(embedder)
    embedding = Embedding(embed, embedder.dim)
    first = embedding.question("question 0")
    assert not first.flags.writeable  # one array handed to every turn that asks this question
    for i in range(1, REMEMBERED_QUESTIONS + 1):
        embedding.question(f"question {i}")
    calls.clear()
    embedding.question(f"question {REMEMBERED_QUESTIONS}")  # still remembered
    embedding.question("question 0")  # the oldest, forgotten
    assert calls == [["question 0"]]
