"""bench.retrieval's bookkeeping on hand-made probes: what counts as coverage, precision and a grounded novel
question, and that a confirmed wording is never also asked."""

from bench.retrieval import BEFORE_THRESHOLD, Probe, asked_and_aliases, half_of, score
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


def test_confirmed_wordings_are_never_asked_and_halves_are_stable():
    covered = {"forgot-password"}
    asked, confirmed = asked_and_aliases(2, covered)
    assert len(confirmed["forgot-password"]) == 2
    assert not set(confirmed["forgot-password"]) & {q.question for q in asked}
    assert all(q.group != "forgot-password" or q.question not in confirmed["forgot-password"] for q in asked)
    assert len({half_of("forgot-password") for _ in range(3)}) == 1
    assert len({half_of(q.group) for q in asked}) == 2
