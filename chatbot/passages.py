"""Which of staff's own text a turn shows: the sentences of a help article closest to the question, the priced
items a sum needs, and an approved answer whole."""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cache.records import Hit

from .relevance import swapped_action
from .support import LIST_MARK, NUMBER, PERIOD_UNITS, text_sentences
from .terms import Vocabulary, stems

_LABEL = re.compile(r"^\s*(?:\d{1,2}[.)]\s*)?([A-Z][\w ]{0,30}?):")  # a list item's label: "2. Personal: $8 ..."


# How close in meaning (cosine, all-mpnet-base-v2) one sentence of the help centre must be to a question to be about
# it. Of the single-message eval questions nothing else grounded, the article of a line this close was the right one
# for 39 answerable ones, a neighbour's for 4, and one for 5 that nothing answers (0.55: 45, 14 and 7); of the 93
# replies handed off for an unsupported "Yes", a passage this close held the facts for 31 and answered 3 questions
# nothing covers (0.55: 44 and 5).
CLOSE_LINE = 0.60


@dataclass(frozen=True)
class Passage:
    """Staff's own text shown as such: a passage of a help article, or an approved answer whole."""

    source: str  # "article:<id>" or "answer:<entry id>"
    title: str
    text: str
    worked: str = ""  # a sum worked from the text's figures (chatbot/sums.py), shown before it
    closeness: float = 0.0  # an article passage's: the question's cosine to its closest sentence
    also: str = ""  # the title of a second article a line of `text` is quoted from (a plan and its add-on)

    @property
    def close(self) -> bool:
        """Whether a sentence of the passage is CLOSE_LINE close to the question: it is about what was asked."""
        return self.closeness >= CLOSE_LINE

    @property
    def from_answer(self) -> bool:
        """Whether the text is an approved answer's, not an article's."""
        return self.source.startswith(_ANSWER_PREFIX)

    @classmethod
    def of_answer(cls, hit: Hit) -> "Passage":
        """An approved answer whole, offered as staff's own text where the reply grounded on it is cut."""
        return cls(answer_source(hit), hit.question, hit.answer)


_ANSWER_PREFIX, _ARTICLE_PREFIX = "answer:", "article:"


def answer_source(hit: Hit) -> str:
    """A passage's `source` for text of the approved answer `hit`."""
    return f"{_ANSWER_PREFIX}{hit.id}"


def article_source(article_id: str) -> str:
    """A passage's `source` for text of the help article `article_id`."""
    return f"{_ARTICLE_PREFIX}{article_id}"


# How much less close than the closest sentence a passage's other sentences may be. Measured on the right article
# of each answerable question of bench.answers' sets: the top three held the facts for 37 of 53 tuning questions,
# within 0.15 of the closest 36, and showed a sentence that makes the reply wrong once fewer on the first fresh set
# (the opposite action's step beside the asked one).
PASSAGE_MARGIN = 0.15


def best_passage(units: Sequence[str], closeness: Sequence[float], question: str, count: int = 3) -> str:
    """At most `count` sentences closest in meaning to the question (`closeness`: their cosines), none less close
    than the closest by more than PASSAGE_MARGIN, in the article's order, and a sentence that states a period where
    the question asks how long and none of those does (_period_line). By the embedding model's cosine they held the
    facts a correct reply needs more often than by shared rare words or as consecutive runs."""
    best = max(closeness)
    near = [i for i in range(len(units)) if closeness[i] >= best - PASSAGE_MARGIN]
    ranked = set(sorted(near, key=lambda i: -closeness[i])[:count])
    ranked |= _period_line(units, closeness, question, ranked)
    return "\n".join(units[i] for i in sorted(ranked | _whole_lists(units, ranked, question)))


# "what if it was more than a month ago?" after the restore steps wants "Deleted files stay in Trash for 30 days on
# Free, ...", which the embedding model does not hold close to "a month": a question that asks how long (not one that
# only says when: "i deleted it 3 days ago") is shown the closest sentence that states a period too, where none of
# the sentences chosen states one (adding a second period beside one added more unasked lines than asked ones). Not
# a list's item: it would bring its whole list (the API key's steps for "up to 1 year").
_ASKS_PERIOD = re.compile(
    rf"\b(?:how long|how far back|how many {PERIOD_UNITS}|(?:more|longer|less|over) than (?:a|an|one|\d+) "
    rf"{PERIOD_UNITS}|after (?:a|an|one|\d+) {PERIOD_UNITS})\b", re.I)
_STATES_PERIOD = re.compile(rf"\b\d+(?:[ -](?:business|working))?[ -]{PERIOD_UNITS}\b")


def _period_line(units: Sequence[str], closeness: Sequence[float], question: str, chosen: set[int]) -> set[int]:
    """The closest unit, not a list's item, that states a period, for a question that asks how long, where no
    `chosen` unit states one."""
    if not _ASKS_PERIOD.search(question) or any(_STATES_PERIOD.search(units[i]) for i in chosen):
        return set()
    stating = [i for i in range(len(units)) if _STATES_PERIOD.search(units[i]) and not LIST_MARK.match(units[i])]
    return {max(stating, key=lambda i: closeness[i])} if stating else set()


def _whole_lists(units: Sequence[str], chosen: set[int], question: str) -> set[int]:
    """Every item of a list one of whose items is chosen: a step shown alone ("2. Enter the new address")
    leaves the customer without the step before it ("1. Open Settings > Account > Email address"). Not a list
    that does the opposite of what is asked (the restore steps beside "delete it for good")."""
    listed = [bool(LIST_MARK.match(unit)) for unit in units]
    whole: set[int] = set()
    for i in (i for i in chosen if listed[i]):
        start, end = i, i
        while start > 0 and listed[start - 1]:
            start -= 1
        while end + 1 < len(units) and listed[end + 1]:
            end += 1
        if not swapped_action(question, "\n".join(units[start : end + 1])):
            whole |= set(range(start, end + 1))
    return whole


def priced_passage(question: str, body: str, vocabulary: Vocabulary, count: int = 2) -> str:
    """The sentences of an article that state a figure and share the most words with the question, a list item
    whose label the question names first ("4. Enterprise: ..." for "enterprise for our 20 person firm", whose
    "person" would otherwise meet "Personal"), and then no other list item ("50 GB" of Personal for "enterprise for
    50 users"): the figures a sum needs."""
    figured = [unit for unit in article_units(body) if NUMBER.search(LIST_MARK.sub("", unit))]
    asked, said = vocabulary.terms(question), f" {' '.join(re.findall(r'[a-z0-9]+', question.lower()))} "
    scores = [(_names_label(unit, said), _score(unit, asked, vocabulary)) for unit in figured]
    named = any(label for label, _ in scores)
    kept = [i for i, (label, score) in enumerate(scores)
            if label or (score and not (named and LIST_MARK.match(figured[i])))]
    ranked = sorted(kept, key=lambda i: scores[i], reverse=True)[:count]
    return "\n".join(figured[i] for i in sorted(ranked))


def article_units(body: str) -> list[str]:
    """An article's passages: a list item whole (its label and every figure after it: "4. Enterprise: custom
    pricing through our sales team. 5 TB ..."; a step and what it says after it), other text sentence by
    sentence."""
    return [unit for line in body.splitlines() if line.strip()
            for unit in ([line.strip()] if LIST_MARK.match(line) else text_sentences(line))]


def names_a_priced_item(question: str, body: str) -> bool:
    """Whether the article lists an item with a figure whose label the question names ("Team: $12 per user ..."
    for "8 person team, how much do we save going annual"): the article states the figures the sum needs."""
    said = f" {' '.join(re.findall(r'[a-z0-9]+', question.lower()))} "
    return any(NUMBER.search(LIST_MARK.sub("", unit)) and _names_label(unit, said) for unit in text_sentences(body))


def list_label(unit: str) -> str:
    """A list item's label ("Team" for "3. Team: $12 per user ..."), or ""."""
    label = _LABEL.match(unit)
    return label.group(1) if label else ""


def _names_label(unit: str, said: str) -> bool:
    """Whether the question (`said`: its words, space-padded) names the label of the list item `unit`."""
    label = list_label(unit)
    return bool(label) and f" {label.lower()} " in said


def _score(unit: str, asked: list[str], vocabulary: Vocabulary) -> float:
    """How many of the asked terms `unit` uses, their rarity breaking ties."""
    have = stems(unit)
    return sum(1.0 + vocabulary.weight(term) / 100 for term in asked if term in have)
