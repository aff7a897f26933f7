"""The bench's workloads: which shipped questions each one asks, and the prompts and references built for them.

A throwaway answer cache is filled with greedy answers to each group's first wording, as the chat service would
have stored them; later wordings then retrieve references from it with the real `AnswerCache.lookup`.
"""

import tempfile
from dataclasses import dataclass

from tqdm import tqdm

from bench.methods import Decoder
from bench.results import Reference
from cache import AnswerCache, Embedder, Hit, NewAnswer
from chatbot.prompt import DEFAULT_SYSTEM_PROMPT, Turn, build_prompt, context_key, prompt_hash
from data import Question, group_questions

WORKLOADS = ("cache_assisted", "rag", "repeat", "followup", "novel")
MAX_PROMPT_TOKENS = 2048


@dataclass(frozen=True)
class Item:
    """One prompt to decode, with the references LLMA may copy from (best first)."""

    workload: str
    group: str
    question: str
    prompt_ids: list[int]
    references: list[list[int]]
    sources: list[Reference]


@dataclass(frozen=True)
class Retrieval:
    """How many cache hits become references, and how similar their questions must be."""

    k: int = 4
    threshold: float = 0.5  # least cosine similarity


@dataclass(frozen=True)
class Selection:
    """The questions of each workload, each list capped at --limit."""

    cache_assisted: list[Question]
    rag: list[Question]
    repeat: list[Question]
    followup: list[Question]
    novel: list[Question]
    groups: dict[str, list[Question]]

    def first_wording(self, question: Question) -> Question:
        return self.groups[question.group][0]

    def groups_to_store(self) -> list[str]:
        """Groups whose first wording's answer the cache must hold for the selected questions."""
        needed = [q.group for q in [*self.cache_assisted, *self.repeat, *self.followup]]
        return list(dict.fromkeys(needed))


@dataclass(frozen=True)
class Workloads:
    items: dict[str, list[Item]]  # workload -> its prompts
    cache_entries: int  # answers stored before any question was asked


def select_questions(questions: list[Question], articles: dict[str, str], limit: int | None) -> Selection:
    groups = group_questions(questions)
    paraphrased = [g for g in groups.values() if len(g) >= 2 and not g[0].follow_up]
    cap = slice(None, limit)
    return Selection(
        cache_assisted=round_robin([[q for q in g[1:] if not q.follow_up] for g in paraphrased])[cap],
        rag=[g[0] for g in groups.values() if g[0].article in articles and not g[0].follow_up][cap],
        repeat=[g[0] for g in paraphrased][cap],
        followup=round_robin([[q for q in g[1:] if q.follow_up] for g in paraphrased])[cap],
        novel=[g[0] for g in groups.values() if len(g) == 1 and not g[0].follow_up][cap],
        groups=groups,
    )


def round_robin(lists: list[list[Question]]) -> list[Question]:
    """The first item of every list, then every second one, ...: a --limit then covers as many groups as it can."""
    longest = max((len(items) for items in lists), default=0)
    return [items[i] for i in range(longest) for items in lists if i < len(items)]


def retrieve(cache: AnswerCache, question: str, retrieval: Retrieval, model_id: str) -> list[Hit]:
    """The cached answers LLMA gets as references for `question`: what the chat service would look up."""
    return cache.lookup(question, k=retrieval.k, threshold=retrieval.threshold, model_id=model_id)


class Workbench:
    """The answer cache filled with greedy answers to first wordings, and the prompts built on it."""

    def __init__(self, decoder: Decoder, cache: AnswerCache) -> None:
        self.decoder = decoder
        self.tok = decoder.tokenizer
        self.cache = cache
        self.model_id = decoder.model_id
        self.prompt_hash = prompt_hash(DEFAULT_SYSTEM_PROMPT, [], {"max_new_tokens": decoder.max_new_tokens})
        self.group_of_entry: dict[int, str] = {}

    def prompt(self, question: str, article: str | None = None, history: list[Turn] | None = None) -> list[int]:
        return build_prompt(self.tok, DEFAULT_SYSTEM_PROMPT, article, history or [], question, MAX_PROMPT_TOKENS).ids

    def store_first_wording(self, question: Question) -> None:
        """Answer a group's first wording with greedy decoding (no article) and cache the answer."""
        answer_ids = self.decoder.greedy(self.prompt(question.question)).tokens
        new = NewAnswer(
            question=question.question, answer=self.decoder.text(answer_ids), answer_ids=answer_ids,
            model_id=self.model_id, context_key=context_key([]), prompt_hash=self.prompt_hash,
        )
        self.group_of_entry[self.cache.add_answer(new)] = question.group

    def stored_answer(self, question: str) -> list[int]:
        found = self.cache.find_exact(question, context_key([]), self.model_id, self.prompt_hash)
        if found is None:
            raise LookupError(f"no stored answer for {question!r}")
        return found.answer_ids

    def cache_assisted(self, q: Question, workload: str, retrieval: Retrieval) -> Item:
        """No article in the prompt; references are the answers to the most similar stored questions."""
        hits = retrieve(self.cache, q.question, retrieval, self.model_id)
        same_group = [self.group_of_entry.get(h.id) == q.group for h in hits]
        sources = [
            Reference("cache", len(h.answer_ids), round(h.score, 4), h.question, same)
            for h, same in zip(hits, same_group, strict=True)
        ]
        return Item(workload, q.group, q.question, self.prompt(q.question), [h.answer_ids for h in hits], sources)

    def rag(self, q: Question, article: str) -> Item:
        """The article is in the system message and is a reference of its own."""
        article_ids = self.tok.encode(article, add_special_tokens=False)
        prompt_ids = self.prompt(q.question, article=article)
        return Item("rag", q.group, q.question, prompt_ids, [article_ids], [Reference("article", len(article_ids))])

    def repeat(self, q: Question) -> Item:
        answer_ids = self.stored_answer(q.question)
        sources = [Reference("stored_answer", len(answer_ids))]
        return Item("repeat", q.group, q.question, self.prompt(q.question), [answer_ids], sources)

    def followup(self, q: Question, first: Question) -> Item:
        """Second turn after the group's first question and its stored greedy answer."""
        answer_ids = self.stored_answer(first.question)
        history = [Turn("user", first.question), Turn("assistant", self.decoder.text(answer_ids))]
        prompt_ids = self.prompt(q.question, history=history)
        sources = [Reference("earlier_answer", len(answer_ids))]
        return Item("followup", q.group, q.question, prompt_ids, [answer_ids], sources)


def build_items(
    bench: Workbench, selection: Selection, articles: dict[str, str], retrieval: Retrieval
) -> dict[str, list[Item]]:
    return {
        "cache_assisted": [bench.cache_assisted(q, "cache_assisted", retrieval) for q in selection.cache_assisted],
        "rag": [bench.rag(q, articles[q.article]) for q in selection.rag],
        "repeat": [bench.repeat(q) for q in selection.repeat],
        "followup": [bench.followup(q, selection.first_wording(q)) for q in selection.followup],
        "novel": [bench.cache_assisted(q, "novel", retrieval) for q in selection.novel],
    }


def prepare_workloads(
    decoder: Decoder, selection: Selection, articles: dict[str, str], retrieval: Retrieval
) -> Workloads:
    """Fill a throwaway answer cache with greedy answers to first wordings; build every workload's prompts on it."""
    embedder = Embedder.load()
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
        cache = AnswerCache.open(cache_dir, embed=embedder.embed, dim=embedder.dim, embedder_name=embedder.name)
        bench = Workbench(decoder, cache)
        for group in tqdm(selection.groups_to_store(), desc="filling the cache", unit="answer"):
            bench.store_first_wording(selection.groups[group][0])
        items = build_items(bench, selection, articles, retrieval)
        cache.close()
    return Workloads(items, len(bench.group_of_entry))
