"""A chat turn made ready to decode: the checked question, the prompt, the article, the grounding answers and
the references LLMA may copy from."""

from dataclasses import dataclass, replace
from functools import cached_property

from cache import AnswerCache
from cache.records import DECLINED, HANDED_OFF, STAFF_TEXT, Hit
from decoding import Engine, StepConfig

from .figures import sum_figures
from .grounding import article_of_match, choose_grounding
from .grounds import ArticlePick, Grounds, first_of_each
from .passages import CLOSE_LINE, Passage, article_units, best_passage
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
from .relevance import ACTION_TERMS, ASKED_TERMS, check_source, known_terms
from .settings import GROUNDING_REVIEWS, ChatSettings
from .shown import DEPARTED_NOTICE, FOLLOWED_ENOUGH, NOTHING_COVERS, UNCHECKED_NOTICE, without_frames
from .support import text_sentences
from .terms import spelled_out, stems, whole_words

# How close in meaning (cosine) an article's closest sentence must be to the question for it to answer alone: on
# bench.answers' tuning part every one that did had 0.46 or more; "holiday photos to my grandma" (file requests) 0.36.
ARTICLE_SENTENCE_CLOSE = 0.45
# The same for an approved answer, looser because staff wrote it for a question: on the three seen sets of
# bench.answers no answer that was right had its closest sentence below 0.40 ("a gift for my mum?" beside the
# student discount: 0.31; "a password on a folder in my own drive" beside link passwords: 0.37).
ANSWER_SENTENCE_CLOSE = 0.40
# How much closer in meaning to the question a sentence of an approved answer's article outside the answer must be
# than the answer's own for it not to ground: 2 of 9 grounded neighbours on bench.answers' tuning part, no right lost.
BEYOND_MARGIN = 0.15
# Nearer than that, the sentence outside still tells when it holds a rare word of the question (one at most
# BEYOND_RARE_DOCUMENTS articles and approved answers use), or its action ("delete"), that the answer and its question
# lack: "pushed my api key to a public github repo" and "If a key was published by mistake ... revoke it" beside the
# create-key steps (0.12). On every set's first turns, 0.06 to 0.15 apart, 6 such were wrong or handed off and none
# right ("later", "authenticator" and "details" are used by 7 or more).
BEYOND_NEAR_MARGIN = 0.06
BEYOND_RARE_DOCUMENTS = 3
# How close in meaning a message that reads whole must be to a sentence of the sources found with the question before
# it to be answered from them. On 240 pairs of unrelated held-out questions, 37 nothing covered alone were grounded on
# the previous question's article; with this and `may_lean_back`, 16. Of the follow-ups of every set, 1 lost its source.
CONTEXT_CLOSE = 0.4


@dataclass(frozen=True)
class Unanswered:
    """A turn that is not decoded: a declined message, a hand-off, or staff's own text (an article's passage)."""

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
        # A follow-up is retrieved with the customer's question before it even when that one was handed off ("can i
        # get the earlier one back" then "how far back does that go on personal"): the prompt leaves it out, the
        # retrieval needs it.
        grounds = self.find_grounds(question, [m.content for m in conversation if m.role == "user"])
        if self.settings.check_sources and needs_sum(question):
            passage = sum_figures(question, grounds.asked, grounds.article.id if grounds.article else None,
                                  self.cache, self.words.vocabulary())
            if passage is None:
                return Unanswered(question, session_id, HANDED_OFF, "needs a sum and no article gives its figures")
            worked = "worked from " if passage.worked else ""
            return Unanswered(question, session_id, STAFF_TEXT, f"needs a sum: {worked}the article's figures", passage)
        if grounds.new_topic:  # asked as a first question: what nothing covers is handed off, not answered from chat
            messages = []
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
        grounds = self.grounds_for(question)
        if previous and changes_subject(question):
            return replace(grounds, new_topic=True)
        if not previous or (grounds.covered and not reads_as_follow_up(question) and self.says_enough(question)):
            return grounds
        joined = self.grounds_for(f"{previous[-1]}\n{question}")
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
        return all(self.far_from(question, text, CONTEXT_CLOSE) for text in texts)

    def grounds_for(self, asked: str) -> Grounds:
        """Retrieve the article and approved answers for `asked`; with the source checks on, keep only those that
        answer it (chatbot/relevance.py), the article found by its own vector tried when the picked one fails."""
        asked = spelled_out(asked)  # "forgot my pw": the embedding models read the short form as noise
        found = self.find_article(asked)  # by the article's own vector: the consistency check's evidence
        matches = self.approved_matches(asked)
        article = self.pick_article(matches, found)
        choice = choose_grounding(matches, found.id if found else None, article.text if article else None,
                                  self.settings.grounding_policy)
        if not self.settings.check_sources:
            return Grounds(article, choice, asked)
        article, article_rejects = self.answering_article(asked, matches, article, found)
        kept, answer_rejects = self.answering_approved(asked, choice.matched)
        choice = replace(choice, grounding=[h for h in choice.grounding if h.id in kept],
                         references=[h for h in choice.references if h.id in kept])
        if article is not None and not kept:
            far = self.far_from(asked, article.body, ARTICLE_SENTENCE_CLOSE)
            if far:
                article, article_rejects = None, [*article_rejects, f"article {article.id!r} {far}"]
        if article is None and not kept:
            article, sentence_rejects = self.article_by_sentence(asked)
            article_rejects = [*article_rejects, *sentence_rejects]
        return Grounds(article, choice, asked, (*article_rejects, *answer_rejects))

    def article_by_sentence(self, asked: str) -> tuple[ArticlePick | None, list[str]]:
        """For a question nothing else grounds: the article holding a sentence CLOSE_LINE close to it, when that
        article passes the source checks as if retrieval had found it that close; and why not, if it does not."""
        line = self.words.article_by_sentence(asked)
        if line is None or line.closeness < CLOSE_LINE:
            return None, []
        record = line.article
        pick = ArticlePick.of(record.id, record.title, record.body, line.closeness)
        verdict = check_source(asked, pick.text, self.words.vocabulary(), self.settings.coverage_needed, pick.score)
        if verdict.answers:
            return pick, []
        return None, [f"article {record.id!r} (by its closest line) {verdict.reason}"]

    def far_from(self, asked: str, text: str, close: float) -> str:
        """Why a source whose words the question shares does not answer it, or "": none of its sentences is
        `close` to the question in meaning ("scan uploads for viruses?" and the upload limits)."""
        units = text_sentences(text)
        closest = max(self.cache.similarities(asked, units), default=0.0) if units else 0.0
        if closest >= close:
            return ""
        return f"has no sentence close to the question ({closest:.2f})"

    def answering_article(
        self, asked: str, matches: list[Hit], *candidates: ArticlePick | None
    ) -> tuple[ArticlePick | None, list[str]]:
        """The first candidate article that answers `asked` (its retrieval score the better of its own and of an
        approved match written from it), and why the ones before it did not."""
        vocabulary, least = self.words.vocabulary(), self.settings.coverage_needed
        rejected = []
        for candidate in first_of_each(*candidates):
            score = max([candidate.score, *(m.score for m in matches if candidate.id in m.article_ids)])
            verdict = check_source(asked, candidate.text, vocabulary, least, score)
            if verdict.answers:
                return candidate, rejected
            rejected.append(f"article {candidate.id!r} {verdict.reason}")
        return None, rejected

    def answering_approved(self, asked: str, matched: list[Hit]) -> tuple[set[int], list[str]]:
        """The ids of the approved answers that answer `asked`, and why the others do not."""
        vocabulary, least = self.words.vocabulary(), self.settings.coverage_needed
        kept, rejected = set(), []
        for hit in matched:
            verdict = check_source(asked, hit.answer, vocabulary, least, hit.score, source_question=hit.question)
            elsewhere = (self.far_from(asked, hit.answer, ANSWER_SENTENCE_CLOSE)
                         or self.asks_beyond(asked, hit)) if verdict.answers else ""
            if verdict.answers and not elsewhere:
                kept.add(hit.id)
            else:
                rejected.append(f"approved answer {hit.id} {elsewhere or verdict.reason}")
        return kept, rejected

    def asks_beyond(self, asked: str, hit: Hit) -> str:
        """Why the question asks what its approved answer does not say, or "": a sentence of the answer's article
        outside the answer is closer in meaning to the question than any sentence of the answer, by BEYOND_MARGIN,
        or by BEYOND_NEAR_MARGIN where it holds a rare word of the question that the answer lacks ("is there a max
        size for the zip?" beside the upload-limits answer, whose article's export sentence says)."""
        article = self.cache.get_article(hit.article_ids[0]) if hit.article_ids else None
        if article is None:
            return ""
        inside = text_sentences(hit.answer)
        answer_text = " ".join(hit.answer.split())
        outside = [unit for unit in text_sentences(article.body) if " ".join(unit.split()) not in answer_text]
        if not inside or not outside:
            return ""
        closest_in = max(self.cache.similarities(asked, inside))
        out_closeness = self.cache.similarities(asked, outside)
        margin = max(out_closeness) - closest_in
        said = f"asks what its article {article.id!r} says beyond it ({max(out_closeness):.2f} against {closest_in:.2f}"
        beyond, held = stems(outside[out_closeness.index(max(out_closeness))]), stems(f"{hit.question}\n{hit.answer}")
        terms = self.words.vocabulary().terms(asked)
        named = sorted({t for t in terms if t in ACTION_TERMS or self.words.vocabulary().rare(t, BEYOND_RARE_DOCUMENTS)}
                       & beyond - held)
        if margin >= BEYOND_MARGIN:
            return f"{said})"
        return f"{said}, and names {', '.join(named)})" if named and margin >= BEYOND_NEAR_MARGIN else ""

    def passage(self, grounds: Grounds, question: str) -> Passage | None:
        """The article's sentences closest to the question, offered as staff's text. A follow-up's article is the
        conversation's, and its passage is the sentences closest to the conversation and to the follow-up alike:
        "and if i pay for personal?" after the Free plan's device limit wants the paid plans' sentence."""
        article = grounds.article
        units = article_units(article.body) if article else []
        if not units:
            return None
        closeness = self.cache.similarities(grounds.asked, units)
        if question != grounds.asked:
            closeness = [(a + b) / 2 for a, b in zip(closeness, self.cache.similarities(question, units), strict=True)]
        text = best_passage(units, closeness, question)
        if not text:
            return None
        closest = max(self.cache.similarities(question, text_sentences(text)), default=0.0)
        return Passage(f"article:{article.id}", article.title, text, closeness=closest)

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

    def approved_matches(self, question: str) -> list[Hit]:
        """The best approved answers by the hybrid match, best first, one more than may ground (the runner-up
        is evidence); none when grounding is off."""
        reviews = GROUNDING_REVIEWS[self.settings.grounding]
        if not reviews or self.settings.grounding_answers == 0:
            return []
        return self.cache.match(
            question, k=self.settings.grounding_answers + 1, model_id=self.engine.model_id, reviews=reviews,
            lexical_weight=self.settings.lexical_weight, match_answers=self.settings.match_answers,
        )

    def pick_article(self, matches: list[Hit], found: ArticlePick | None) -> ArticlePick | None:
        """The article for the prompt: the one an approved answer was written from when the question matches
        that answer clearly (`article_match_threshold`, ahead of the runner-up by `article_match_margin`),
        else the one `found` by its own vector. A question is nearer a short answer in customers' words than a
        whole article, so this picks the right article more often: held-out rewordings of the shipped groups,
        85% right and 10% wrong with all-mpnet-base-v2 (62% and 28% by the article's vector alone), 82% and 10%
        with MiniLM (67% and 19%) (docs/retrieval)."""
        settings = self.settings
        article_id = article_of_match(matches, settings.article_match_threshold, settings.article_match_margin)
        if not settings.use_knowledge_base or article_id is None or (found is not None and found.id == article_id):
            return found
        article = self.cache.get_article(article_id)  # None once staff deleted it
        if article is None:
            return found
        return ArticlePick.of(article.id, article.title, article.body, matches[0].score)

    def find_article(self, question: str) -> ArticlePick | None:
        """The article closest to the question by its own vector, if it clears `article_threshold`; else the one
        article that uses the question's rare words (retrieved as far, so the source checks read its words alone)."""
        if not self.settings.use_knowledge_base:
            return None
        hit = self.cache.best_article(question, threshold=self.settings.article_threshold)
        if hit is None:
            article = self.words.article_by_rare_words(question)
            return ArticlePick.of(article.id, article.title, article.body, 0.0) if article else None
        return ArticlePick.of(hit.id, hit.title, hit.body, hit.score)

