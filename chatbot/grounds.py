"""What a question is answered from once the source checks ran: the article picked and the approved answers kept."""

from dataclasses import dataclass

from .grounding import GroundingChoice
from .prompt import article_in_prompt


@dataclass(frozen=True)
class ArticlePick:
    """The help article put into the prompt, with its similarity to the question."""

    id: str
    text: str  # "Title\n\nbody"
    score: float  # the question's cosine to the article, or to the approved answer it was taken from

    @classmethod
    def of(cls, article_id: str, title: str, body: str, score: float) -> "ArticlePick":
        """An article as the prompt holds it, found with `score`."""
        return cls(article_id, article_in_prompt(title, body), score)

    @property
    def title(self) -> str:
        return self.text.split("\n\n", 1)[0]

    @property
    def body(self) -> str:
        return self.text.split("\n\n", 1)[-1]


@dataclass(frozen=True)
class Grounds:
    """What a question is answered from once the checks ran: the article, the approved answers, the text that was
    retrieved and checked (a follow-up joined to the question before it), the checks that failed, and whether the
    message reads whole and is about something else than the conversation (then asked as a first question)."""

    article: ArticlePick | None
    choice: GroundingChoice
    asked: str
    rejected: tuple[str, ...] = ()
    new_topic: bool = False

    @property
    def covered(self) -> bool:
        return self.article is not None or bool(self.choice.matched)

    @property
    def closeness(self) -> float:
        """The retrieval score of the closest source that answers: how well these grounds fit what was asked."""
        scores = [hit.score for hit in self.choice.matched] + ([self.article.score] if self.article else [])
        return max(scores, default=0.0)


def first_of_each(*articles: ArticlePick | None) -> list[ArticlePick]:
    """The articles in order, each id once (its first pick kept), none for None."""
    seen: dict[str, ArticlePick] = {}
    for article in articles:
        if article is not None and article.id not in seen:
            seen[article.id] = article
    return list(seen.values())

