"""The bench's workloads: which shipped questions each one asks, and the prompts and references built for them.

A throwaway answer cache is filled with greedy answers to each group's first wording, as the chat service would
have stored them; later wordings then retrieve references from it with the real `AnswerCache.lookup`. For the
grounded workloads those answers are then approved (and the shipped staff-written answers added as approved),
and the best approved answer goes into the prompt as the chat service's grounding puts it there.
"""

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tqdm import tqdm

from bench.methods import Decoder
from bench.results import GROUNDED_WORKLOADS, Reference
from cache import AnswerCache, Embedder, Hit, NewAnswer
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from chatbot.grounding import GroundingPolicy, choose_grounding
from chatbot.prompt import (
    DEFAULT_SYSTEM_PROMPT,
    ApprovedAnswer,
    Message,
    answer_token_ids,
    build_prompt,
    context_key,
    prompt_hash,
)
from chatbot.settings import TUNED, ChatSettings
from data import Question, StaffAnswer, group_questions

WORKLOADS = ("cache_assisted", "rag", "repeat", "followup", "novel", *GROUNDED_WORKLOADS)
MAX_PROMPT_TOKENS = 2048
STAFF_MODEL_ID = "staff"  # the shipped staff answers' entries, kept apart from the model's own answers


@dataclass(frozen=True)
class Item:
    """One prompt to decode, with the references LLMA may copy from (best first)."""

    workload: str
    group: str
    question: str
    prompt_ids: list[int]
    references: list[list[int]]
    sources: list[Reference]
    plain_prompt_ids: list[int] | None = None  # grounded items: the same prompt without the approved answer


@dataclass(frozen=True)
class Retrieval:
    """How many cache hits become references, and how similar their questions must be."""

    k: int = 4
    threshold: float = 0.5  # least cosine similarity


BUNDLED_THRESHOLDS = TUNED[EMBEDDING_BUNDLED]


@dataclass(frozen=True)
class Grounding:
    """Which approved answers go into a prompt: the chat service's defaults for the bundled MiniLM this bench
    embeds with (fast to seed; the service workload, bench/service.py, measures the app's embedding model)."""

    threshold: float = BUNDLED_THRESHOLDS.grounding_threshold  # least fused score of the best match
    answers: int = ChatSettings.grounding_answers
    token_budget: int = ChatSettings.grounding_token_budget  # answer tokens added to the prompt, at most
    margin: float = BUNDLED_THRESHOLDS.grounding_margin  # the consistency check (chatbot/grounding.py)
    article_margin: float = BUNDLED_THRESHOLDS.grounding_article_margin
    lexical_weight: float = BUNDLED_THRESHOLDS.lexical_weight
    match_answers: bool = ChatSettings.match_answers


@dataclass(frozen=True)
class Selection:
    """The questions of each workload, each list capped at --limit."""

    cache_assisted: list[Question]
    rag: list[Question]
    repeat: list[Question]
    followup: list[Question]
    novel: list[Question]
    groups: dict[str, list[Question]]

    @property
    def grounded(self) -> list[Question]:
        """The grounded workloads ask the cache-assisted questions again, with an approved answer in the prompt."""
        return self.cache_assisted

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


def pick_grounding(cache: AnswerCache, question: str, grounding: Grounding, model_id: str) -> list[Hit]:
    """The approved answers the chat service would accept for `question`: its hybrid match, article and check."""
    article = cache.best_article(question, threshold=ChatSettings.article_threshold)
    matches = cache.match(question, k=grounding.answers + 1, model_id=model_id,
                          lexical_weight=grounding.lexical_weight, match_answers=grounding.match_answers)
    policy = GroundingPolicy(grounding.threshold, grounding.margin, grounding.article_margin,
                             answers=grounding.answers, token_budget=grounding.token_budget)
    text = f"{article.title}\n\n{article.body}" if article else None
    return choose_grounding(matches, article.id if article else None, text, policy).matched


class Workbench:
    """The answer cache filled with greedy answers to first wordings, and the prompts built on it."""

    def __init__(self, decoder: Decoder, cache: AnswerCache, grounding: Grounding = Grounding()) -> None:
        self.decoder = decoder
        self.grounding = grounding
        self.tok = decoder.tokenizer
        self.cache = cache
        self.model_id = decoder.model_id
        self.prompt_hash = prompt_hash(DEFAULT_SYSTEM_PROMPT, [], {"max_new_tokens": decoder.max_new_tokens})
        self.group_of_entry: dict[int, str] = {}

    def prompt(
        self, question: str, article: str | None = None, history: list[Message] | None = None,
        approved: list[ApprovedAnswer] | None = None,
    ) -> list[int]:
        system, turns = DEFAULT_SYSTEM_PROMPT, history or []
        return build_prompt(self.tok, system, article, turns, question, MAX_PROMPT_TOKENS, approved=approved or [],
                            layout=ChatSettings.prompt_layout).ids  # where the app puts approved answers

    def store_first_wording(self, question: Question) -> None:
        """Answer a group's first wording with greedy decoding (no article) and cache the answer."""
        answer_ids = self.decoder.greedy(self.prompt(question.question)).tokens
        new = NewAnswer(
            question=question.question, answer=self.decoder.text(answer_ids), answer_ids=answer_ids,
            model_id=self.model_id, context_key=context_key([]), prompt_hash=self.prompt_hash,
        )
        self.group_of_entry[self.cache.add_answer(new)] = question.group

    def approve_stored_answers(self) -> None:
        """The first wordings' greedy answers become approved: staff approved them as they were."""
        self.cache.set_review(list(self.group_of_entry), "approved")

    def store_staff_answer(self, staff: StaffAnswer) -> None:
        """A shipped staff-written answer as an approved entry, tokenized as decoding copies it."""
        new = NewAnswer(
            question=staff.question, answer=staff.answer, answer_ids=answer_token_ids(self.tok, staff.answer),
            model_id=STAFF_MODEL_ID, article_ids=[staff.article], review="approved",
        )
        self.group_of_entry[self.cache.add_answer(new)] = staff.group

    def own_approved(self, q: Question, approved_by: str) -> Hit | None:
        """The approved answer stored for `q`'s group under `approved_by`, scored against `q` as a lookup would."""
        ranked = self.cache.lookup(q.question, k=len(self.group_of_entry), threshold=-1.0, model_id=approved_by,
                                   reviews=("approved",))
        return next((h for h in ranked if self.group_of_entry.get(h.id) == q.group), None)

    def cache_reference(self, hit: Hit, q: Question, kind: str = "cache") -> Reference:
        return Reference(kind, len(hit.answer_ids), round(hit.score, 4), hit.question,
                         self.group_of_entry.get(hit.id) == q.group)

    def stored_answer(self, question: str) -> list[int]:
        found = self.cache.find_exact(question, context_key([]), self.model_id, self.prompt_hash)
        if found is None:
            raise LookupError(f"no stored answer for {question!r}")
        return found.answer_ids

    def cache_assisted(self, q: Question, workload: str, retrieval: Retrieval) -> Item:
        """No article in the prompt; references are the answers to the most similar stored questions."""
        hits = retrieve(self.cache, q.question, retrieval, self.model_id)
        sources = [self.cache_reference(h, q) for h in hits]
        return Item(workload, q.group, q.question, self.prompt(q.question), [h.answer_ids for h in hits], sources)

    def grounded(self, q: Question, workload: str, retrieval: Retrieval, approved_by: str) -> Item:
        """The cache-assisted prompt plus the group's own approved answer (the workload as issue 12 defines it:
        the first wording's answer approved and in the prompt); references are that answer first, then the usual
        cache hits. Whether the chat service's own lookup would have picked that answer is recorded beside it.
        """
        own = self.own_approved(q, approved_by)
        if own is None:  # no approved answer for this group (the staff wrote none for groups without an article)
            return self.cache_assisted(q, workload, retrieval)
        picked = pick_grounding(self.cache, q.question, self.grounding, approved_by)
        hits = [h for h in retrieve(self.cache, q.question, retrieval, self.model_id) if h.id != own.id]
        prompt_ids = self.prompt(q.question, approved=[ApprovedAnswer(own.question, own.answer)])
        approved = replace(self.cache_reference(own, q, "approved"), retrieved=own.id in {h.id for h in picked})
        sources = [approved] + [self.cache_reference(h, q) for h in hits]
        references = [h.answer_ids for h in [own, *hits]]
        return Item(workload, q.group, q.question, prompt_ids, references, sources, self.prompt(q.question))

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
        history = [Message("user", first.question), Message("assistant", self.decoder.text(answer_ids))]
        prompt_ids = self.prompt(q.question, history=history)
        sources = [Reference("earlier_answer", len(answer_ids))]
        return Item("followup", q.group, q.question, prompt_ids, [answer_ids], sources)


def build_items(
    bench: Workbench, selection: Selection, articles: dict[str, str], retrieval: Retrieval
) -> dict[str, list[Item]]:
    """The ungrounded workloads' prompts, on the cache of the model's own (unreviewed) answers."""
    return {
        "cache_assisted": [bench.cache_assisted(q, "cache_assisted", retrieval) for q in selection.cache_assisted],
        "rag": [bench.rag(q, articles[q.article]) for q in selection.rag],
        "repeat": [bench.repeat(q) for q in selection.repeat],
        "followup": [bench.followup(q, selection.first_wording(q)) for q in selection.followup],
        "novel": [bench.cache_assisted(q, "novel", retrieval) for q in selection.novel],
    }


def build_grounded_items(
    bench: Workbench, selection: Selection, retrieval: Retrieval, staff_answers: Sequence[StaffAnswer]
) -> dict[str, list[Item]]:
    """Approve the cached first-wording answers and add the staff answers; then ground the later wordings on each."""
    bench.approve_stored_answers()
    for staff in staff_answers:
        bench.store_staff_answer(staff)
    return {
        "grounded": [bench.grounded(q, "grounded", retrieval, bench.model_id) for q in selection.grounded],
        "grounded_staff": [bench.grounded(q, "grounded_staff", retrieval, STAFF_MODEL_ID) for q in selection.grounded],
    }


def prepare_workloads(
    decoder: Decoder, selection: Selection, articles: dict[str, str], retrieval: Retrieval,
    staff_answers: Sequence[StaffAnswer] = (), grounding: Grounding = Grounding(),
) -> Workloads:
    """Fill a throwaway answer cache with greedy answers to first wordings; build every workload's prompts on it.

    Prompts cost no decoding, so all are built whichever workloads run: retrieval is the same as in a full run.
    """
    embedder = Embedder.load()
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
        cache = AnswerCache.open(cache_dir, embed=embedder.embed, dim=embedder.dim, embedder_name=embedder.name)
        bench = Workbench(decoder, cache, grounding)
        for group in tqdm(selection.groups_to_store(), desc="filling the cache", unit="answer"):
            bench.store_first_wording(selection.groups[group][0])
        cache_entries = len(bench.group_of_entry)
        items = build_items(bench, selection, articles, retrieval)
        items |= build_grounded_items(bench, selection, retrieval, staff_answers)
        cache.close()
    return Workloads(items, cache_entries)
