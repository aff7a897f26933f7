"""Served replies: feedback, verification, listing and the dashboard built on them."""

import pytest
from cache_helpers import answer

from cache import NewReply, QuestionCount
from cache.records import HANDED_OFF


def reply(question: str = "How do I reset my password?", **fields) -> NewReply:
    return NewReply(question=question, answer="Use the link.", **fields)


def test_feedback_and_verification_are_stored(cache):
    reply_id = cache.record_reply(reply(stats={"speedup": 2.0}, speedup=2.0, session_id="s1"))
    cache.set_feedback(reply_id, -1, "wrong link")
    cache.set_verification(reply_id, identical=True, measured_speedup=1.8)
    stored = cache.get_reply(reply_id)
    assert (stored.feedback, stored.feedback_reason) == (-1, "wrong link")
    assert (stored.verified, stored.measured_speedup) == (True, 1.8)
    assert stored.session_id == "s1" and stored.created_at.tzinfo is not None
    assert cache.get_reply(reply_id + 1) is None
    cache.set_feedback(reply_id, 0, "ignored")  # the thumb clicked again: no rating
    assert (cache.get_reply(reply_id).feedback, cache.get_reply(reply_id).feedback_reason) == (None, "")


def test_feedback_and_verification_validate_their_input(cache):
    reply_id = cache.record_reply(reply())
    with pytest.raises(ValueError, match="feedback"):
        cache.set_feedback(reply_id, 2)
    with pytest.raises(ValueError, match="measured_speedup"):
        cache.set_verification(reply_id, True, float("nan"))
    with pytest.raises(KeyError):
        cache.set_feedback(reply_id + 1, 1)


def test_replies_are_listed_newest_first_and_outlive_their_entry(cache):
    entry_id = cache.add_answer(answer("How do I reset my password?"))
    first = cache.record_reply(reply(entry_id=entry_id))
    second = cache.record_reply(reply(entry_id=entry_id, exact_hit=True))
    cache.record_reply(reply("Unrelated?"))
    assert [r.id for r in cache.replies_for_entry(entry_id)] == [second, first]
    assert [r.id for r in cache.recent_replies(limit=2, offset=1)] == [second, first]
    cache.delete_entry(entry_id)
    assert cache.get_reply(first).entry_id is None
    assert cache.record_reply(reply(entry_id=entry_id)) > 0  # an evicted entry id is stored as None


def test_dashboard_counts_rates_speedups_and_savings(cache):
    entry_id = cache.add_answer(answer("How do I reset my password?"))
    timing = {"seconds": 1.0, "greedy_seconds": 3.0}
    cache.record_reply(reply(entry_id=entry_id, exact_hit=True, speedup=4.0, **timing))
    cache.record_reply(reply("how do I reset my password", reference_entry_ids=[entry_id], speedup=2.0))
    no_refs = cache.record_reply(reply("Where is my invoice?", speedup=1.0, **timing))
    cache.set_feedback(no_refs, -1)
    stats = cache.dashboard_stats()
    assert (stats.entries, stats.articles, stats.replies, stats.exact_hits) == (1, 0, 3, 1)
    assert stats.exact_hit_rate == pytest.approx(1 / 3) and stats.reference_hit_rate == pytest.approx(1 / 3)
    assert stats.mean_speedup == pytest.approx(7 / 3) and stats.median_speedup == 2.0
    assert stats.seconds_saved == pytest.approx(4.0)
    assert (stats.positive_feedback, stats.negative_feedback) == (0, 1)
    assert stats.top_questions[0] == QuestionCount("How do I reset my password?", 2)
    assert stats.replies_without_references == 1
    assert stats.top_unreferenced_questions == [QuestionCount("Where is my invoice?", 1)]


def test_dashboard_lists_the_questions_no_approved_answer_backed(cache):
    cache.record_reply(reply("Is my data encrypted?", backed=False))
    cache.record_reply(reply("is my data encrypted", backed=False))
    cache.record_reply(reply("Do you have a dark mode?", backed=False, stop_reason=HANDED_OFF))
    cache.record_reply(reply("How do I reset my password?", backed=True))
    cache.record_reply(reply("Served before it was recorded?"))  # backed None: not counted either way
    stats = cache.dashboard_stats()
    assert (stats.replies_not_backed, stats.replies_handed_off) == (3, 1)
    assert stats.top_unbacked_questions == [QuestionCount("Is my data encrypted?", 2),
                                            QuestionCount("Do you have a dark mode?", 1)]


def test_an_empty_dashboard_has_no_speedups(cache):
    stats = cache.dashboard_stats()
    assert stats.replies == 0 and stats.exact_hit_rate == 0.0 and stats.mean_speedup is None


def test_reply_series_gives_plot_points_oldest_first(cache):
    cache.record_reply(reply(tokens_per_forward_pass=3.5, speedup=2.0, seconds=1.0, greedy_seconds=2.5))
    cache.record_reply(reply(stats={"tokens_per_forward_pass": 9.0}))  # the blob is for display: never read
    series = cache.reply_series()
    assert [(p["speedup"], p["tokens_per_forward_pass"]) for p in series] == [(2.0, 3.5), (None, None)]
    assert [p["seconds_saved"] for p in series] == [1.5, 0.0]
    assert series[0]["created_at"] <= series[1]["created_at"]


def test_typed_timing_fields_are_stored_apart_from_the_stats_blob(cache):
    reply_id = cache.record_reply(reply(stats={"note": "for display"}, tokens_per_forward_pass=2.25, seconds=0.5))
    stored = cache.get_reply(reply_id)
    assert (stored.tokens_per_forward_pass, stored.seconds) == (2.25, 0.5)
    assert stored.stats == {"note": "for display"}
    assert cache.get_reply(cache.record_reply(reply())).tokens_per_forward_pass is None
