"""A chat turn made ready to decode: the checked question, the prompt, the article, the grounding answers and
the references LLMA may copy from."""

from dataclasses import dataclass, replace
from functools import cached_property

from cache import AnswerCache
from cache.records import DECLINED, HANDED_OFF, STAFF_TEXT, Hit
from decoding import Engine, StepConfig

from .figures import followed_sum, sum_figures
from .grounding import contains
from .grounds import ArticlePick, Grounds
from .passages import Passage, answer_source, article_source, article_units, best_passage
from .prompt import (
    ApprovedAnswer,
    Message,
    Prompt,
    answer_places,
    build_prompt,
    context_key,
    parse_history,
    prompt_hash,
)
from .questions import (
    HelpCentreWords,
    changes_subject,
    check_question,
    decline_reason,
    may_lean_back,
    needs_sum,
    own_records,
    reads_as_follow_up,
    service_state,
    without_hand_offs,
)
from .relevance import ASKED_TERMS, known_terms
from .settings import ChatSettings
from .shown import DEPARTED_NOTICE, FOLLOWED_ENOUGH, NOTHING_COVERS, UNCHECKED_NOTICE, without_frames
from .sources import SourceFinder
from .support import text_sentences
from .terms import whole_words

# How close in meaning a message that reads whole must be to a sentence of the sources found with the question before
# it to be answered from them. On 240 pairs of unrelated held-out questions, 37 nothing covered alone were grounded on
# the previous question's article; with this and `may_lean_back`, 16. Of the follow-ups of every set, 1 lost its source.
CONTEXT_CLOSE = 0.4


@dataclass(frozen=True)
class Unanswered:
    """A turn that is not decoded: a declined message, a hand-off, or staff's own text (a passage of an article or of
    an approved answer, or a sum's figures)."""

    question: str
    session_id: str
    outcome: str  # cache.records: DECLINED, HANDED_OFF or STAFF_TEXT
    reason: str  # the check that decided it, for staff
    passage: Passage | None = None


@dataclass(frozen=True)
class ChatTurn:
    """What the steps of one turn share."""

    question: str
    history: list[Message]  # the messages kept in the prompt
    prompt: Prompt
    article: ArticlePick | None
    grounding: list[Hit]  # approved answers put into the prompt; also the first references
    references: list[Hit]  # every reference LLMA may copy from: the grounding first, then similar past answers
    context_key: str
    prompt_hash: str
    session_id: str
    steps: StepConfig  # the shape of every decode forward; Verify reruns greedy with the same
    # Approved answers the consistency check accepted (in the prompt or, when the article holds them, not):
    # the question becomes a suggested wording of each, for staff to confirm (chatbot/grounding.py).
    matched: tuple[Hit, ...] = ()
    # The texts a reply may state facts from (the article and approved answers in its prompt, the assistant's
    # earlier replies), the question as retrieved (words a reply may restate), the article passage offered when
    # a reply is cut, and the source checks that failed.
    sources: tuple[str, ...] = ()
    asked: str = ""
    passage: Passage | None = None
    rejected: tuple[str, ...] = ()

    @property
    def article_id(self) -> str | None:
        return self.article.id if self.article else None

    @cached_property
    def grounding_places(self) -> dict[int, list[range]]:
        """Where each grounding answer (by its reference index) stands in the prompt's token ids, every time it
        does; found once per turn (the prompt and its grounding are fixed), for the stats of every chunk."""
        return {index: answer_places(self.prompt.ids, list(hit.answer_ids[:-1]))  # without its end of sequence
                for index, hit in enumerate(self.references[: len(self.grounding)])}

    def reference_id(self, source: int) -> int | None:
        """The cache entry behind a copied run's source index; None for the prompt or the reply itself."""
        return self.references[source].id if 0 <= source < len(self.references) else None

    def why_uncovered(self) -> str:
        """Why nothing grounds the question, for staff: the source checks that failed, if any ran."""
        return "; ".join(self.rejected) or NOTHING_COVERS

    @property
    def uncovered(self) -> bool:
        """A first question that neither an approved answer nor a help article covers: the model would have
        nothing but its own weights to answer from."""
        return not self.matched and self.article is None and not self.history

    def context_text(self) -> str:
        return "\n".join(f"{m.role}: {m.content}" for m in self.history)

    def notice(self, followed: float = 1.0) -> str:
        """What the customer should know about this turn: that no approved answer backs the reply, or that the
        reply left the one in its prompt (`followed`: the share of its tokens copied from it), that old messages
        were left out."""
        notices = [] if self.matched else [UNCHECKED_NOTICE]
        if self.grounding and followed < FOLLOWED_ENOUGH:
            notices.append(DEPARTED_NOTICE.format(share=followed))
        if self.prompt.dropped_turns:
            notices.append(f"The conversation is longer than the model can read: the {self.prompt.dropped_turns} "
                           "oldest messages were left out of this answer.")
        return " ".join(notices)


class TurnPlanner:
    """Turns a question and its conversation into a ChatTurn, reading the cache for articles and answers."""

    def __init__(self, cache: AnswerCache, engine: Engine, settings: ChatSettings, context_window: int) -> None:
        self.cache, self.engine, self.settings = cache, engine, settings
        self.context_window = context_window
        self.words = HelpCentreWords(cache, whole_words(engine.tokenizer))
        self.sources = SourceFinder(cache, settings, engine.model_id, self.words)

    def plan(self, question: object, history: list[dict] | None, session_id: str) -> "ChatTurn | Unanswered":
        question = check_question(question, self.settings.max_question_chars)
        conversation = parse_history(history, self.settings.max_question_chars * 4)
        messages = without_hand_offs(conversation, self.settings.handoff_message)
        if declined := decline_reason(question) if self.settings.check_sources else "":
            return Unanswered(question, session_id, DECLINED, declined)
        records = own_records(question) if self.settings.check_sources else ""
        if records:
            return Unanswered(question, session_id, HANDED_OFF, f"asks about the customer's own records ({records!r})")
        state = service_state(question) if self.settings.check_sources else ""
        if state:
            return Unanswered(question, session_id, HANDED_OFF, f"asks about the service's state right now ({state!r})")
        asked_before = [m.content for m in conversation if m.role == "user"]
        followed = followed_sum(question, asked_before, self.cache, self.words.vocabulary()) \
            if self.settings.check_sources else None
        if followed is not None:
            return Unanswered(question, session_id, STAFF_TEXT, "a follow-up of a sum: worked from the article's "
                              "figures", followed)
        # A follow-up is retrieved with the customer's question before it even when that one was handed off ("can i
        # get the earlier one back" then "how far back does that go on personal"): the prompt leaves it out, the
        # retrieval needs it.
        grounds = self.find_grounds(question, asked_before)
        if self.settings.check_sources and needs_sum(question):
            passage = sum_figures(question, grounds.asked, grounds.article.id if grounds.article else None,
                                  self.cache, self.words.vocabulary())
            if passage is None:
                return Unanswered(question, session_id, HANDED_OFF, "needs a sum and no article gives its figures")
            worked = "worked from " if passage.worked else ""
            return Unanswered(question, session_id, STAFF_TEXT, f"needs a sum: {worked}the article's figures", passage)
        if grounds.new_topic:  # asked as a first question: what nothing covers is handed off, not answered from chat
            messages = []
        repeated = self.repeated_answer(grounds, question, conversation) if self.settings.check_sources else None
        if repeated is not None:
            return Unanswered(question, session_id, STAFF_TEXT, "a follow-up of the answer just given: its closest "
                              "sentences", repeated)
        article, grounding = grounds.article, grounds.choice.grounding
        passage = Passage.of_answer(grounding[0]) if grounding else self.passage(grounds, question)
        prompt = build_prompt(
            self.engine.tokenizer, self.settings.system_prompt, article.text if article else None,
            without_frames(messages),  # the model reads staff's text in them as plain text; staff see it as shown
            question, self.context_window - self.settings.max_new_tokens,
            approved=[ApprovedAnswer(hit.question, hit.answer) for hit in grounding],
            layout=self.settings.prompt_layout,
        )
        kept = messages[prompt.dropped_turns :]
        sources = [*([article.text] if article else []), *(f"{hit.question}\n{hit.answer}" for hit in grounding),
                   *(m.content for m in kept if m.role == "assistant")]
        return ChatTurn(
            question=question, history=kept, prompt=prompt, article=article, grounding=grounding,
            references=self.references(question, grounds.choice.matched), context_key=context_key(kept),
            prompt_hash=self.exact_key(prompt, article, grounding), session_id=session_id,
            steps=self.engine.steps(len(prompt.ids), self.settings.max_new_tokens, prompt.beginning),
            matched=tuple(grounds.choice.matched), sources=tuple(sources), asked=grounds.asked, passage=passage,
            rejected=grounds.rejected,
        )

    def find_grounds(self, question: str, previous: list[str]) -> Grounds:
        """The grounds of the question alone, or, for a follow-up ("and on Personal?", or what nothing covers alone
        unless it reads whole and off the topic, or changes the subject), of the `previous` question of the
        customer's joined with it: retrieved and checked as the conversation's question."""
        grounds = self.sources.grounds_for(question)
        if previous and changes_subject(question):
            return replace(grounds, new_topic=True)
        if not previous or (grounds.covered and not reads_as_follow_up(question) and self.says_enough(question)):
            return grounds
        joined = self.sources.grounds_for(f"{previous[-1]}\n{question}")
        if not grounds.covered and not may_lean_back(question) and joined.covered and self.off_topic(question, joined):
            return replace(grounds, rejected=(*grounds.rejected, "reads alone and is about something else"),
                           new_topic=True)
        # "is there anything cheaper for students?" reads as a follow-up, but alone it fits its own answer better
        # than joined to the question before.
        if joined.covered and not (grounds.covered and grounds.closeness > joined.closeness):
            return joined
        return grounds if grounds.covered else replace(grounds, rejected=grounds.rejected + joined.rejected)

    def says_enough(self, question: str) -> bool:
        """Whether the message names ASKED_TERMS things the help centre knows, enough for a source it alone found to
        be about it: "we're on team. can i just call someone?" knows "team" alone, and the invite steps cover it."""
        return len(known_terms(question, self.words.vocabulary())) >= ASKED_TERMS

    def off_topic(self, question: str, joined: Grounds) -> bool:
        """Whether a message that reads alone is about something else than the sources the conversation found:
        none of their sentences is CONTEXT_CLOSE to it ("two charges on my bank statement" after a sync question)."""
        texts = [*([joined.article.body] if joined.article else []), *(h.answer for h in joined.choice.grounding)]
        return all(self.sources.far_from(question, text, CONTEXT_CLOSE) for text in texts)

    def passage(self, grounds: Grounds, question: str) -> Passage | None:
        """The article's sentences closest to the question, offered as staff's text."""
        article = grounds.article
        return self.closest_passage(article_source(article.id), article.title, article_units(article.body), grounds,
                                    question) if article else None

    def repeated_answer(self, grounds: Grounds, question: str, conversation: list[Message]) -> Passage | None:
        """For a follow-up grounded on the approved answer that the reply just before it gave whole ("and on
        personal?" after the upload limits): that answer's sentences closest to the follow-up, not the same reply
        again; None where they are the whole answer (a step's list is shown whole)."""
        replies = [m for m in conversation if m.role == "assistant"]
        grounding = grounds.choice.grounding
        if grounds.new_topic or not grounding or not replies:
            return None
        hit, units = grounding[0], article_units(grounding[0].answer)
        if not contains(without_frames(replies[-1:])[0].content, hit.answer):
            return None
        passage = self.closest_passage(answer_source(hit), hit.question, units, grounds, question, read_before=True)
        return passage if passage and len(passage.text.splitlines()) < len(units) else None

    def closest_passage(self, source: str, title: str, units: list[str], grounds: Grounds, question: str,
                        read_before: bool = False) -> Passage | None:
        """The sentences of a source (`units`) closest to the question. A follow-up's source is the conversation's,
        and its passage is the sentences closest to the conversation and to the follow-up alike: "and if i pay for
        personal?" after the Free plan's device limit wants the paid plans' sentence. Where the customer has
        read the source (`read_before`), a sentence is also as close as it is to the follow-up alone."""
        if not units:
            return None
        closeness = self.cache.similarities(grounds.asked, units)
        if question != grounds.asked:
            alone = self.cache.similarities(question, units)
            closeness = [max((a + b) / 2, b if read_before else 0.0) for a, b in zip(closeness, alone, strict=True)]
        text = best_passage(units, closeness, question)
        if not text:
            return None
        closest = max(self.cache.similarities(question, text_sentences(text)), default=0.0)
        return Passage(source, title, text, closeness=closest)

    def references(self, question: str, grounding: list[Hit]) -> list[Hit]:
        """The accepted approved answers first, then the most similar past answers not among them."""
        similar = self.cache.lookup(
            question, k=self.settings.references_k, threshold=self.settings.similarity_threshold,
            model_id=self.engine.model_id,
        )
        grounded_ids = {hit.id for hit in grounding}
        return [*grounding, *(hit for hit in similar if hit.id not in grounded_ids)]

    def exact_key(self, prompt: Prompt, article: ArticlePick | None, grounding: list[Hit]) -> str:
        """The exact-repeat key. The prompt's token ids hold the article and the grounding text, so an edited or
        newly approved answer changes it and can never be served from a stale exact hit."""
        decode_settings = {
            "max_new_tokens": self.settings.max_new_tokens, "model": self.engine.model_id,
            "grounding": [[hit.id, hit.answer] for hit in grounding],
            "repetition": self.settings.repetition.to_json(),
        }
        return prompt_hash(str(prompt.ids), [article.id if article else ""], decode_settings)
