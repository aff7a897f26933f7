"""Prompt beginnings worth prefilling before customers ask: every help article, and every approved answer with
its article, as the prompts of the turns they guide begin (chatbot/prompt.py).

A support prompt is mostly its beginning: the system prompt and the article come to some 340 tokens of the
shipped prompts' 420-500, and a turn grounded by an approved answer begins with that answer too. Prefilled
once while the model is idle (decoding/scheduler.py, `Scheduler.warm`), their chunks come from the prefix cache
for every later prompt that begins alike, bit for bit what the prefill would have computed.
"""

from collections.abc import Iterator

from cache import AnswerCache

from .prompt import ApprovedAnswer, article_in_prompt, beginning_ids
from .settings import ChatSettings

# The warm-up takes at most this share of the prefix cache, leaving the rest to what customers ask.
WARM_SHARE = 0.75
_PAGE = 200


def prompt_beginnings(
    cache: AnswerCache, tokenizer, model_id: str, settings: ChatSettings, budget_tokens: int, chunk: int = 1,
) -> list[list[int]]:
    """The beginnings to warm, approved answers' first (they hold their article's too), at most `budget_tokens`
    tokens together; articles that no answer begins with follow. `chunk`: the prefill chunk size, since two
    beginnings share whole chunks only (the chunk a beginning ends in is its own)."""
    articles = {a.id: article_in_prompt(a.title, a.body) for a in cache.list_articles()} \
        if settings.use_knowledge_base else {}
    beginnings: list[list[int]] = []
    used_articles: set[str | None] = set()
    if settings.grounding != "off" and settings.grounding_answers > 0:
        entries = sorted(approved_entries(cache, model_id), key=lambda e: str(first_article(e, articles)))
        for entry in entries:
            article_id = first_article(entry, articles)
            used_articles.add(article_id)
            approved = [ApprovedAnswer(entry.question, entry.answer)]
            beginnings.append(beginning_ids(tokenizer, settings.system_prompt, articles.get(article_id), approved,
                                            settings.prompt_layout))
    beginnings += [
        beginning_ids(tokenizer, settings.system_prompt, text, (), settings.prompt_layout)
        for article_id, text in articles.items() if article_id not in used_articles
    ]
    kept, held, previous = [], 0, []
    for ids in beginnings:
        held += len(ids) - common_prefix(ids, previous) // chunk * chunk  # answers of one article share its chunks
        if held > budget_tokens:
            break
        kept.append(ids)
        previous = ids
    return kept


def first_article(entry, articles: dict[str, str]) -> str | None:
    """The article an approved answer was written from, where the help centre still has it."""
    return next((a for a in entry.article_ids if a in articles), None)


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def approved_entries(cache: AnswerCache, model_id: str) -> Iterator:
    """Every approved entry of this model, a page at a time."""
    offset = 0
    while True:
        page = cache.list_entries(review="approved", sort="date", descending=False, limit=_PAGE, offset=offset)
        yield from (entry for entry in page.entries if entry.model_id == model_id)
        offset += _PAGE
        if offset >= page.total:
            return
