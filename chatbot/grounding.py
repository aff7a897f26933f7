"""Which approved answers ground a reply: the consistency check between the hybrid match and the article.

A wrong approved answer in the prompt misleads the reply (under the "answer" layout the reply repeats it), so the
best match grounds only when the evidence agrees: its score clears the threshold, and either the runner-up was
written from the same article (then the best of the two grounds), or the best was answered with the help article
chosen for this question and still beats the runner-up by the smaller article margin, or it beats the runner-up
entry by the margin. Otherwise it is a reference only, which changes speed and never the reply. An answer the
chosen article already holds word for word is a reference only too: in the prompt it would only lengthen it
(LLMA copies it from the article all the same).
"""

from dataclasses import KW_ONLY, dataclass, field

from cache.records import Hit

# A question this close to one of an entry's wordings was asked in words staff confirmed for it: that is
# evidence enough, even beside a near-duplicate approved entry (which staff should merge).
EXACT_WORDING = 0.98


@dataclass(frozen=True)
class GroundingPolicy:
    """The thresholds, chosen on the tuning half of the shipped question groups (bench/retrieval.py)."""

    threshold: float  # least fused score (best-wording cosine + weighted BM25) of the best match
    margin: float  # how far the best must beat the runner-up when its article is not the chosen one
    article_margin: float = 0.0  # how far it must beat the runner-up when its article is the chosen one
    # The rest by name only: the bench once passed `answers` where `sibling_grounds` had been inserted (answers
    # 384, the token budget, for the app's 1).
    _: KW_ONLY
    # When the best and the runner-up were both answered from one article, the best grounds (True) or
    # neither does (False). Live, "How can I get a refund?" matched the annual-plan refund answer 0.621 and the
    # duplicate-charge one 0.597: grounding neither left the 135M model to invent a "Fees tab" beside the
    # article; grounding the best gave the approved refund steps (tests/chatbot/test_embedding_model.py).
    sibling_grounds: bool = True
    answers: int = 1  # approved answers put into the prompt, at most
    token_budget: int = 384  # their answer tokens, at most


@dataclass(frozen=True)
class GroundingChoice:
    """What the check decided for one question."""

    grounding: list[Hit] = field(default_factory=list)  # into the prompt
    references: list[Hit] = field(default_factory=list)  # agreeing approved answers kept out of the prompt
    # why: "article agrees", "best of its article" (the runner-up a sibling from the same article), "margin",
    # "exact wording", "disagrees", "ambiguous" (the runner-up within the article margin, or a sibling with
    # sibling_grounds off), "below threshold", "in article"
    reason: str = "no match"

    @property
    def matched(self) -> list[Hit]:
        """Every approved answer the check accepted for this question, in the prompt or not."""
        return [*self.grounding, *self.references]


def choose_grounding(
    matches: list[Hit], article_id: str | None, article_text: str | None, policy: GroundingPolicy
) -> GroundingChoice:
    """Decide from `matches` (hybrid scores, best first, approved entries only)."""
    if policy.answers == 0 or not matches:
        return GroundingChoice()
    best = matches[0]
    if best.score < policy.threshold:
        return GroundingChoice(reason="below threshold")
    runner_up = matches[1] if len(matches) > 1 else None
    agrees = _answered_from(best, article_id)
    # Two answers written from one article (a sibling topic: "reset link missing" beside "reset my password")
    # are the question's two nearest: the question is about that article, whichever article its own vector
    # picked (that vector misses short questions: "what does the free plan include?" picked discounts at 0.40
    # beside two plans-and-pricing answers, and the model, left with the article alone, invented a "100 GB"
    # free plan). The article cannot tell the two apart, the scores do, and either holds only the article's
    # facts, which the prompt holds too (the match's article is the prompt's), so the best grounds without the
    # article margin (or, with sibling_grounds off, neither does unless the margin decides). Measured on the
    # held-out half (bench.retrieval): 2 more right groundings, none wrong, no novel question grounded.
    sibling = runner_up is not None and _same_article(best, runner_up)
    ahead = best.score - (runner_up.score if runner_up else -1.0)
    beats = ahead >= policy.margin
    exact = (best.dense if best.dense is not None else best.score) >= EXACT_WORDING
    article_decides = policy.sibling_grounds if sibling else agrees and ahead >= policy.article_margin
    if not (beats or exact or article_decides):
        return GroundingChoice(reason="ambiguous" if agrees or sibling else "disagrees")
    accepted = [best, *(hit for hit in matches[1:] if _also_grounds(hit, article_id, policy))][: policy.answers]
    inside = [hit for hit in accepted if article_text and contains(article_text, hit.answer)]
    rest = within_token_budget([hit for hit in accepted if hit not in inside], policy.token_budget)
    reason = "in article" if inside and not rest else _why(article_decides and not sibling, beats, exact)
    return GroundingChoice(grounding=rest, references=inside, reason=reason)


def article_of_match(matches: list[Hit], threshold: float, margin: float) -> str | None:
    """The article the best approved match was written from, when the question matches it with at least
    `threshold` and `margin` ahead of the runner-up; else None (the article's own vector decides)."""
    best = matches[0] if matches else None
    if best is None or best.review != "approved" or not best.article_ids or best.score < threshold:
        return None
    ahead = best.score - (matches[1].score if len(matches) > 1 else -1.0)
    return best.article_ids[0] if ahead >= margin else None


def _why(article_agrees: bool, beats: bool, exact: bool) -> str:
    if article_agrees:
        return "article agrees"
    if beats or exact:
        return "margin" if beats else "exact wording"
    return "best of its article"


def _answered_from(hit: Hit, article_id: str | None) -> bool:
    return article_id is not None and article_id in hit.article_ids


def _same_article(hit: Hit, other: Hit) -> bool:
    """Both answers were written from the article `hit` was written from first."""
    return bool(hit.article_ids) and hit.article_ids[0] in other.article_ids


def _also_grounds(hit: Hit, article_id: str | None, policy: GroundingPolicy) -> bool:
    """A further answer (beyond the best) grounds when it clears the threshold and names no other article
    than the chosen one."""
    agrees = article_id is None or not hit.article_ids or article_id in hit.article_ids
    return hit.score >= policy.threshold and agrees


def contains(article_text: str, answer: str) -> bool:
    """True when the article holds the answer's text, whatever the spacing and case."""
    answer = " ".join(answer.lower().split())
    return bool(answer) and answer in " ".join(article_text.lower().split())


def within_token_budget(candidates: list[Hit], budget: int) -> list[Hit]:
    """The candidates, best first, whose answers fit together in `budget` tokens (one too long is skipped)."""
    chosen = []
    for hit in candidates:
        if len(hit.answer_ids) <= budget:
            chosen.append(hit)
            budget -= len(hit.answer_ids)
    return chosen
