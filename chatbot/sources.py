"""The sources of a question: the help article and the approved answers retrieved for a text, each kept only where
the source checks say it answers that text (chatbot/relevance.py), with why the others were not."""

from dataclasses import replace

from cache import AnswerCache
from cache.records import Hit

from .actions import ACTION_TERMS
from .grounding import article_of_match, choose_grounding
from .grounds import ArticlePick, Grounds, first_of_each
from .passages import CLOSE_LINE
from .questions import ClosestLine, HelpCentreWords
from .relevance import check_source, plan_down
from .settings import GROUNDING_REVIEWS, ChatSettings
from .support import text_sentences
from .terms import spelled_out, stems

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
# Nearer than that, a sentence outside the answer still tells when it names a rare word of the question (one at most
# BEYOND_RARE_DOCUMENTS articles and approved answers use: looser than RARE_DOCUMENTS, which finds an article alone) or
# its action ("delete"), and the answer does not (measured in docs/history.md, twentieth stop).
BEYOND_NEAR_MARGIN = 0.06
BEYOND_RARE_DOCUMENTS = 3
# How close a sentence that downgrades must be to a question that asks for a smaller plan to find its article,
# where no sentence is CLOSE_LINE close: the downgrade line was 0.40-0.52 to the five such questions of the sets seen
# (docs/history.md, twenty-first stop).
PLAN_LINE_CLOSE = 0.40
# What that sentence says: a downgrade ("cancel" lines are about leaving every paid plan, or an account).
DOWNGRADING = ("downgrade",)


class SourceFinder:
    """Retrieves the article and approved answers for a question's text from the cache, and checks each answers it."""

    def __init__(self, cache: AnswerCache, settings: ChatSettings, model_id: str, words: HelpCentreWords) -> None:
        self.cache, self.settings, self.model_id, self.words = cache, settings, model_id, words

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
            line = self.plan_change_line(asked)
        if line is None:
            return None, []
        record = line.article
        pick = ArticlePick.of(record.id, record.title, record.body, line.closeness)
        verdict = check_source(asked, pick.text, self.words.vocabulary(), self.settings.coverage_needed, pick.score)
        if verdict.answers:
            return pick, []
        return None, [f"article {record.id!r} (by its closest line) {verdict.reason}"]

    def plan_change_line(self, asked: str) -> ClosestLine | None:
        """For a question that asks to move to a smaller plan, the closest sentence of the help centre that says
        DOWNGRADING, if PLAN_LINE_CLOSE close: "how do i go back down to personal" and "Click Change plan, then
        Downgrade to Free (or choose Personal if you are leaving Team)", which no vector finds for a question about
        leaving Team (the team-roles article and the upgrade steps are nearer)."""
        line = self.words.article_by_sentence(asked, saying=DOWNGRADING) if plan_down(asked) else None
        return line if line is not None and line.closeness >= PLAN_LINE_CLOSE else None

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
        or by BEYOND_NEAR_MARGIN where that sentence names a rare word or an action of the question that the answer
        lacks ("is there a max size for the zip?" beside the upload-limits answer, whose article's export sentence
        says; "pushed my api key to a public repo" beside the create-key steps)."""
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
        closest_out = max(out_closeness)
        said = f"asks what its article {article.id!r} says beyond it ({closest_out:.2f} against {closest_in:.2f}"
        if closest_out - closest_in >= BEYOND_MARGIN:
            return f"{said})"
        if closest_out - closest_in < BEYOND_NEAR_MARGIN:
            return ""
        vocabulary = self.words.vocabulary()
        telling = {term for term in vocabulary.terms(asked)
                   if term in ACTION_TERMS or vocabulary.rare(term, BEYOND_RARE_DOCUMENTS)}
        beyond, held = stems(outside[out_closeness.index(closest_out)]), stems(f"{hit.question}\n{hit.answer}")
        named = sorted((telling & beyond) - held)
        return f"{said}, and names {', '.join(named)})" if named else ""

    def approved_matches(self, question: str) -> list[Hit]:
        """The best approved answers by the hybrid match, best first, one more than may ground (the runner-up
        is evidence); none when grounding is off."""
        reviews = GROUNDING_REVIEWS[self.settings.grounding]
        if not reviews or self.settings.grounding_answers == 0:
            return []
        return self.cache.match(
            question, k=self.settings.grounding_answers + 1, model_id=self.model_id, reviews=reviews,
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
