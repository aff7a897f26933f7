"""The figures a question that needs a sum is given instead of the 135M model's arithmetic: the lines of an article
that state them ("Team: $12 per user per month or $120 per user per year"), shown as the help centre's own text, and
the sum worked from them where they settle it (chatbot/sums.py)."""

from cache import AnswerCache

from .passages import Passage, article_source, article_units, list_label, names_a_priced_item, priced_passage
from .prompt import article_in_prompt
from .questions import needs_sum, reads_as_follow_up
from .relevance import unknown_product
from .sums import (
    add_on_line,
    add_on_sum,
    asks_for_add_on,
    carried_sum,
    names_a_discount,
    priced_line,
    qualified_alike,
    users_asked,
    word_set,
    worked_sum,
)
from .terms import Vocabulary, spelled_out


def sum_figures(question: str, asked: str, article_id: str | None, cache: AnswerCache,
                vocabulary: Vocabulary) -> Passage | None:
    """The figures for `question` (retrieved as `asked`) and the sum worked from them: from the article its checks
    kept (`article_id`), else from the price list of the plan it names; None when neither states them. A question
    that names a discount the figures found do not state is worked from the help centre's one line that does."""
    articles = cache.list_articles()
    if asks_for_add_on(question) and (added := add_on_figures(question, articles)):
        return added
    figures = _figures(question, asked, article_id, cache, vocabulary)
    plans = _plans(articles)
    worked = worked_sum(question, figures.text, plans) if figures else ""
    if figures and not worked and retrieved_alone(question, asked):
        # The checked article may state the figures in passing ("choose Personal ($8 per month ...) or Team ($12
        # per user per month ...)"), two plans a line, which settles no sum; the price list states one a line.
        listed = price_list(asked, cache, vocabulary)
        if listed and (worked := worked_sum(question, listed.text, plans)):
            figures = listed
    if not worked and names_a_discount(question):
        return discounted_figures(question, articles, plans) or figures
    return Passage(figures.source, figures.title, figures.text, worked) if figures else None


def followed_sum(question: str, asked_before: list[str], cache: AnswerCache, vocabulary: Vocabulary) -> Passage | None:
    """For a follow-up that changes a term of the sum the customer asked before ("and monthly?", then "and for 7?"),
    the figures and the sum worked with that term changed (chatbot/sums.py `carried_sum`); None where it changes
    none or nothing is worked, and the turn goes on as any other. `asked_before`: the customer's earlier messages.
    The figures are the carried sum's own, found as a first question's are (the follow-up's words retrieve little)."""
    summed = [i for i, message in enumerate(asked_before) if needs_sum(message)]
    if not summed:
        return None
    plans, carried = _plans(cache.list_articles()), asked_before[summed[-1]]
    for follow_up in [*asked_before[summed[-1] + 1 :], question]:
        carried = carried_sum(carried, follow_up, plans) if reads_as_follow_up(follow_up) else ""
        if not carried:
            return None
    figures = sum_figures(carried, carried, None, cache, vocabulary)
    return figures if figures is not None and figures.worked else None


def _plans(articles: list) -> frozenset[str]:
    """The labels of the help centre's lists ("Team", "Personal"), lowered: the plan names a sum can name."""
    return frozenset(label.lower() for a in articles for unit in article_units(a.body) if (label := list_label(unit)))


def add_on_figures(question: str, articles: list) -> Passage | None:
    """The price line of the plan the question names and the help centre's one line that prices a storage add-on
    for it, quoted together, with the month's sum worked from them (chatbot/sums.py add_on_sum); None unless exactly
    one of each. The plan's line alone, what the price list gave before, left the customer without the add-on."""
    named = word_set(question)
    add_ons = [(article, unit, added) for article in articles for unit in article_units(article.body)
               if (added := add_on_line(unit)) and added.plan.lower() in named]
    if len(add_ons) != 1:
        return None
    add_on_article, add_on_unit, added = add_ons[0]
    priced = [(article, unit) for article in articles for unit in article_units(article.body)
              if list_label(unit).lower() == added.plan.lower() and priced_line(unit).prices]
    if len(priced) != 1:
        return None
    plan_article, plan_unit = priced[0]
    return Passage(article_source(plan_article.id), plan_article.title, f"{plan_unit}\n{add_on_unit}",
                   add_on_sum(question, plan_unit, added),
                   also=add_on_article.title if add_on_article.id != plan_article.id else "")


def retrieved_alone(question: str, asked: str) -> bool:
    """Whether the question was retrieved as itself (`asked`, spelled out), not joined to the one before it as a
    follow-up: only then is another article's price list its own question's."""
    return asked == spelled_out(question)


def discounted_figures(question: str, articles: list, plans: frozenset[str]) -> Passage | None:
    """The help centre's one priced line for the discount and plan the question names ("30% off the Team plan:
    $8.40 per user per month" for a charity's team), with the sum worked from it; None unless exactly one."""
    found = [(article, unit, worked) for article in articles for unit in article_units(article.body)
             if qualified_alike(question, unit) and (worked := worked_sum(question, unit, plans))]
    if len(found) != 1:
        return None
    article, unit, worked = found[0]
    # "30% off the Team plan" states no minimum of seats, the Team plan's line does: fewer users are not worked.
    named = plans & word_set(question)
    minimum = max((priced_line(u).minimum_users for a in articles for u in article_units(a.body)
                   if list_label(u).lower() in named), default=0)
    if users_asked(question) < minimum and not priced_line(unit).minimum_users:
        return None
    return Passage(article_source(article.id), article.title, unit, worked)


def _figures(question: str, asked: str, article_id: str | None, cache: AnswerCache,
             vocabulary: Vocabulary) -> Passage | None:
    article = cache.get_article(article_id) if article_id else None
    text = priced_passage(asked, article.body, vocabulary) if article else ""
    if text:
        return Passage(article_source(article.id), article.title, text)
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
    return Passage(article_source(article.id), article.title, text) if text else None
