"""The figures a question that needs a sum is given instead of the 135M model's arithmetic: the lines of an article
that state them ("Team: $12 per user per month or $120 per user per year"), shown as the help centre's own text."""

from cache import AnswerCache

from .prompt import article_in_prompt
from .questions import reads_as_follow_up
from .relevance import unknown_product
from .support import Passage, names_a_priced_item, priced_passage
from .terms import Vocabulary


def sum_figures(question: str, asked: str, article_id: str | None, cache: AnswerCache,
                vocabulary: Vocabulary) -> Passage | None:
    """The figures for `question` (retrieved as `asked`) from the article its checks kept (`article_id`), else
    from the price list of the plan it names; None when neither states them."""
    article = cache.get_article(article_id) if article_id else None
    text = priced_passage(asked, article.body, vocabulary) if article else ""
    if text:
        return Passage(f"article:{article.id}", article.title, text)
    # A follow-up's "does that cost extra" asks about what came before, not about the price list.
    return None if reads_as_follow_up(question) else price_list(asked, cache, vocabulary)


def price_list(asked: str, cache: AnswerCache, vocabulary: Vocabulary) -> Passage | None:
    """For a sum no checked article gives the figures of ("how much do we save a year going annual on team"): the
    figures of the closest article that lists the plan the question names, unless it is about another company's
    product."""
    listing = [a for a in cache.list_articles() if names_a_priced_item(asked, a.body)]
    if not listing or unknown_product(asked, vocabulary):
        return None
    closeness = cache.similarities(asked, [article_in_prompt(a.title, a.body) for a in listing])
    article = listing[max(range(len(listing)), key=closeness.__getitem__)]
    text = priced_passage(asked, article.body, vocabulary)
    return Passage(f"article:{article.id}", article.title, text) if text else None
