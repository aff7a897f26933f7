"""The consistency check before grounding (chatbot/grounding.py), on hand-made matches: no model, no cache."""

from dataclasses import replace

from cache.records import Hit
from chatbot.grounding import GroundingPolicy, choose_grounding, contains

POLICY = GroundingPolicy(threshold=0.6, margin=0.1)
ARTICLE = "Resetting your password\n\nGo to the sign-in page and click Forgot password."


def hit(entry_id: int, score: float, article: str = "reset-password", answer: str = "Use the reset link.") -> Hit:
    return Hit(entry_id, f"question {entry_id}", answer, [1, 2, 3], score, "approved", article_ids=(article,))


def test_the_best_match_grounds_when_its_article_is_the_chosen_one_even_in_a_near_tie():
    choice = choose_grounding([hit(1, 0.7), hit(2, 0.69, "billing")], "reset-password", ARTICLE, POLICY)
    assert ([h.id for h in choice.grounding], choice.reason) == ([1], "article agrees")


def test_an_agreeing_article_still_needs_the_article_margin_over_the_runner_up():
    policy = GroundingPolicy(threshold=0.6, margin=0.1, article_margin=0.02)
    near_tie = choose_grounding([hit(1, 0.7), hit(2, 0.69, "billing")], "reset-password", ARTICLE, policy)
    ahead = choose_grounding([hit(1, 0.7), hit(2, 0.675, "billing")], "reset-password", ARTICLE, policy)
    assert (near_tie.matched, near_tie.reason) == ([], "ambiguous")
    assert ([h.id for h in ahead.grounding], ahead.reason) == ([1], "article agrees")


def test_of_two_answers_from_the_chosen_article_the_best_grounds_even_in_a_near_tie():
    policy = GroundingPolicy(threshold=0.6, margin=0.1, article_margin=0.02)
    siblings = choose_grounding([hit(1, 0.7), hit(2, 0.695)], "reset-password", ARTICLE, policy)
    assert ([h.id for h in siblings.grounding], siblings.reason) == ([1], "best of its article")
    clear = choose_grounding([hit(1, 0.8), hit(2, 0.65)], "reset-password", ARTICLE, policy)
    assert ([h.id for h in clear.grounding], clear.reason) == ([1], "margin")


def test_two_answers_from_one_article_ground_the_best_whatever_article_the_question_picked():
    # "what does the free plan include?": two plans-and-pricing answers nearest, the question's own vector on
    # the discounts article; the two answers from one article outweigh it.
    policy = GroundingPolicy(threshold=0.6, margin=0.1, article_margin=0.02)
    siblings = choose_grounding([hit(1, 0.7), hit(2, 0.65)], "billing", ARTICLE, policy)
    assert ([h.id for h in siblings.grounding], siblings.reason) == ([1], "best of its article")
    unpicked = choose_grounding([hit(1, 0.7), hit(2, 0.65)], None, None, policy)
    assert [h.id for h in unpicked.grounding] == [1]
    apart = choose_grounding([hit(1, 0.7), hit(2, 0.65, "sharing")], "billing", ARTICLE, policy)
    assert (apart.matched, apart.reason) == ([], "disagrees")
    off = choose_grounding([hit(1, 0.7), hit(2, 0.65)], "billing", ARTICLE, replace(policy, sibling_grounds=False))
    assert (off.matched, off.reason) == ([], "ambiguous")


def test_with_sibling_grounds_off_two_answers_from_the_chosen_article_are_told_apart_by_the_margin_alone():
    policy = GroundingPolicy(threshold=0.6, margin=0.1, sibling_grounds=False)
    siblings = choose_grounding([hit(1, 0.7), hit(2, 0.65)], "reset-password", ARTICLE, policy)
    assert (siblings.matched, siblings.reason) == ([], "ambiguous")
    clear = choose_grounding([hit(1, 0.8), hit(2, 0.65)], "reset-password", ARTICLE, policy)
    assert ([h.id for h in clear.grounding], clear.reason) == ([1], "margin")


def test_a_question_asked_in_a_confirmed_wording_grounds_beside_a_near_duplicate():
    duplicates = [hit(1, 1.0), hit(2, 0.99)]
    choice = choose_grounding(duplicates, "reset-password", ARTICLE, POLICY)
    assert ([h.id for h in choice.grounding], choice.reason) == ([1], "exact wording")


def test_another_article_needs_a_margin_over_the_runner_up():
    near_tie = choose_grounding([hit(1, 0.7, "billing"), hit(2, 0.65)], "reset-password", ARTICLE, POLICY)
    clear = choose_grounding([hit(1, 0.8, "billing"), hit(2, 0.65)], "reset-password", ARTICLE, POLICY)
    assert (near_tie.matched, near_tie.reason) == ([], "disagrees")
    assert ([h.id for h in clear.grounding], clear.reason) == ([1], "margin")


def test_below_the_threshold_nothing_grounds_whatever_agrees():
    choice = choose_grounding([hit(1, 0.59)], "reset-password", ARTICLE, POLICY)
    assert (choice.matched, choice.reason) == ([], "below threshold")


def test_an_answer_the_article_already_holds_stays_out_of_the_prompt_as_a_reference():
    own_words = hit(1, 0.9, answer="go to the sign-in page and  click Forgot password.")
    choice = choose_grounding([own_words], "reset-password", ARTICLE, POLICY)
    assert (choice.grounding, [h.id for h in choice.references], choice.reason) == ([], [1], "in article")
    assert contains(ARTICLE, own_words.answer) and not contains(ARTICLE, "Click Reset in Settings.")


def test_further_answers_ground_only_above_the_threshold_and_within_the_budget():
    policy = GroundingPolicy(threshold=0.6, margin=0.1, answers=3, token_budget=6)
    matches = [hit(1, 0.9), hit(2, 0.7), hit(3, 0.65, "billing"), hit(4, 0.5)]
    assert [h.id for h in choose_grounding(matches, "reset-password", ARTICLE, policy).grounding] == [1, 2]
