"""What a fresh install starts with: the shipped help articles and staff-written approved answers."""

from dataclasses import dataclass, field

from cache import AnswerCache, NewAnswer
from data import StaffAnswer, load_articles, load_staff_answers

from .prompt import answer_token_ids


@dataclass(frozen=True)
class Seed:
    """Help articles (id -> "Title\\nbody") and approved staff answers."""

    articles: dict[str, str] = field(default_factory=dict)
    answers: list[StaffAnswer] = field(default_factory=list)

    @classmethod
    def shipped(cls) -> "Seed":
        return cls(load_articles(), load_staff_answers())


def seed_help_centre(cache: AnswerCache, tokenizer, model_id: str, seed: Seed) -> None:
    """Store the seed's articles, and its answers as approved entries that can guide replies at once."""
    for article_id, text in seed.articles.items():
        title, _, body = text.partition("\n")
        cache.upsert_article(article_id, title.strip(), body.strip())
    for staff in seed.answers:
        cache.add_answer(
            NewAnswer(
                question=staff.question, answer=staff.answer, answer_ids=answer_token_ids(tokenizer, staff.answer),
                model_id=model_id, article_ids=[staff.article], review="approved",
            )
        )
