"""bench.retrieval's bookkeeping on hand-made probes: what counts as coverage, precision and a grounded novel
question, and that a confirmed wording is never also asked."""

from dataclasses import replace

from bench.retrieval import (
    ARTICLE_MARGINS,
    ARTICLE_THRESHOLDS,
    BEFORE_THRESHOLD,
    TARGET_PRECISION,
    Probe,
    Score,
    article_score,
    asked_and_aliases,
    half_of,
    score,
    tune_article_rule,
)
from cache.records import Hit
from chatbot.grounding import GroundingPolicy

POLICY = GroundingPolicy(threshold=0.5, margin=0.1)
GROUPS = {1: "reset", 2: "billing"}


def probe(group: str, covered: bool, best: int, best_score: float, article: str | None = "a") -> Probe:
    matches = [Hit(best, "q", "answer", [1], best_score, "approved", ("a",), dense=best_score),
               Hit(3 - best, "q", "answer", [1], 0.1, "approved", ("b",), dense=0.1)]
    return Probe(group, "a question", covered, "tune", article, None, matches)


def test_coverage_precision_and_novel_grounded_are_counted_per_half():
    probes = [
        probe("reset", True, 1, 0.9),  # grounded, right group
        probe("reset", True, 2, 0.9),  # grounded, wrong group
        probe("reset", True, 1, 0.3),  # below the threshold: not covered
        probe("novel-1", False, 1, 0.8),  # a novel question grounded: wrong
        probe("novel-2", False, 2, 0.2),
    ]
    measured = score(probes, GROUPS, POLICY, "tune")
    assert (measured.covered, measured.uncovered) == (3, 2)
    assert (measured.coverage, measured.precision, measured.novel_grounded) == (2 / 3, 1 / 2, 1 / 2)
    assert score(probes, GROUPS, POLICY, "held-out").covered == 0
    before = score(probes, GROUPS, None, "tune")  # the best cosine alone, from BEFORE_THRESHOLD on
    assert before.coverage == 2 / 3 and BEFORE_THRESHOLD > 0.3


def test_the_tuning_asks_the_precision_target_of_a_lower_bound_not_of_a_lucky_point_estimate():
    def precision(right: int, grounded: int) -> Score:
        return Score(1.0, right / grounded, 0.0, grounded, 0, grounded, right)

    assert precision(1, 1).precision_floor() < 0.6  # one right answer proves little
    assert precision(67, 70).precision_floor() < TARGET_PRECISION < precision(67, 70).precision
    assert precision(70, 70).precision_floor() > TARGET_PRECISION
    floors = [precision(right, 100).precision_floor() for right in range(90, 101)]
    assert floors == sorted(floors) and all(f < right / 100 for f, right in zip(floors, range(90, 101), strict=True))


def test_confirmed_wordings_are_never_asked_and_halves_are_stable():
    covered = {"forgot-password"}
    asked, confirmed = asked_and_aliases(2, covered)
    assert len(confirmed["forgot-password"]) == 2
    assert not set(confirmed["forgot-password"]) & {q.question for q in asked}
    assert all(q.group != "forgot-password" or q.question not in confirmed["forgot-password"] for q in asked)
    assert len({half_of("forgot-password") for _ in range(3)}) == 1
    assert len({half_of(q.group) for q in asked}) == 2


def test_the_article_pick_takes_a_clear_approved_matchs_article_and_counts_right_wrong_and_none():
    def asked(gold: str | None, vector_pick: str | None, best_score: float) -> Probe:
        p = probe("reset", True, 1, best_score, article=vector_pick)  # the best match was written from "a"
        return replace(p, gold_article=gold)

    probes = [
        asked("a", "b", 0.9),  # the vector picked "b"; the clear match's article "a" is right
        asked("a", "b", 0.3),  # too weak a match: the vector's wrong "b" stays
        asked("b", None, 0.9),  # the match's "a" is wrong where the vector had none
        asked(None, None, 0.2),  # no article covers it, and none is given
    ]
    vector = article_score(probes, None, "tune")
    assert (vector.right, vector.wrong, vector.novel_picked) == (0, 2 / 3, 0)
    rule = article_score(probes, (0.5, 0.1), "tune")
    assert (rule.right, rule.wrong, rule.labeled, rule.unlabeled) == (1 / 3, 2 / 3, 3, 1)
    assert tune_article_rule(probes) in {(t, m) for t in ARTICLE_THRESHOLDS for m in ARTICLE_MARGINS}
