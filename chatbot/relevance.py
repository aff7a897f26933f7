"""Does this source answer this question? The check an approved answer or a help article passes before it goes
into a prompt.

The nearest approved answer often answers a neighbour: "turn off two-factor" sits next to the turn-on steps, "do
you sell printers?" next to the discounts, and the reply then copies the neighbour faithfully. Three tests, each
cheap and explainable to staff:
- coverage: the share of the question's distinctive words (weighted by their rarity in the help centre) that the
  source uses; words the help centre never uses weigh nothing, and a question with none it knows is not covered;
- named products: a product the question names that the help centre never names ("Dropbox") is another company's;
- direction: an action and its opposite (on/off, add/remove, ...) must not be swapped.
"""

import functools
import re
from dataclasses import dataclass

from .actions import (
    DEVICE_SWITCH,
    OPPOSITES,
    PARTICLES,
    SWITCHED,
    SWITCHES,
    padded,
    phrase_regex,
    said,
    said_at,
)
from .devices import other_device
from .others import PLATFORMS, PRODUCTS, TOOLS
from .terms import DIRECTION_WORDS, STOPWORDS, Vocabulary, content_words, stem, stems

# An offering the question asks for by a word the help centre never uses ("is there a family plan", "do you have a
# lifetime deal", "is there a dark mode", "a chrome extension"): Nimbus has no such thing, and the nearest answer
# (the plans list, the app's install steps) would read as yes. Words that
# say which plan or how it is billed rather than name one are not names.
_ASKS_FOR = (r" (?:is there|are there|do (?:you|u|ya)(?: guys)?|does nimbus(?: drive)?|(?:can|could) i get|"
             r"you (?:offer|have|sell))")
_OFFERING = re.compile(_ASKS_FOR + r" (?:[a-z]+ ){0,2}?(?:a|an|any) ((?:[a-z]+ )?[a-z]+) "
                       r"((?:plan|deal|bundle|package|tier|membership|version|edition|app|client|tool|option|"
                       r"feature|mode|plugin|extension|program|programme|scheme|bount(?:y|ie))s?) ")
_CLAUSE_BREAK = re.compile(r"[?!,;:\n]|\.(?:\s|$)")  # "what do you offer? i have a tiny plan": two asks
_NOT_NAMES = frozenset("yearly annual monthly paid free current cheap cheaper cheapest bigger biggest larger largest "
                       "smaller smallest higher highest lower lowest better best whole new old next top same other "
                       "different right storage data actual real official proper native dedicated separate "
                       "standalone full".split())

# Sides that undo whatever was said before them: "undo" is deleting's opposite only where a deletion or removal is
# said ("i made her an admin by mistake, how do i undo that" is not answered by not deleting).
_RELATIVE = frozenset({"undo", "reverse"})

# A plan left for a smaller one ("go back down to personal"), and how a source says a plan changes: the remove-member
# steps do not move a team to Personal, nor does deleting the account (which says "cancel"). What follows these
# supposes the move rather than asks for it (plan_down).
_PLAN_DOWN = re.compile(r" (?:downgrad(?:e|ed|ing)|down to (?:the |a )?(?:free|personal|team)) ")
PLAN_CHANGED = ("downgrade", "change plan")
_SUPPOSED = re.compile(r" (?:if|when|once|after) (?:[a-z0-9'.]+ ){0,4}$")

# Words that say what follows is not wanted: refused_action's and swapped_action's.
_NOT_WANTED = r"(?:don't|dont|do not|no longer) (?:want|wanna|need)"
# A phrase within a few words after these is not wanted (swapped_action).
_NEGATION = re.compile(rf" (?:{_NOT_WANTED}(?: to)?|without|instead of|rather than|rather not)"
                       r"(?: [a-z0-9'.-]+){0,3} $")

# A switch's two ways, as a reply sentence may say them: one sentence saying both ("To stop uploading, enable camera
# uploads") tells the customer to do the opposite of what it restates, unless a source sentence says both too.
_OFF_WAY = re.compile(r"\b(?:stop|stopping|(?:turn|switch)(?:ed|ing)? (?:\w+ ){0,3}off|disable|pause)\b", re.I)
_ON_WAY = re.compile(r"\b(?:enable|enabled|enabling|(?:turn|switch)(?:ed|ing)? (?:it |them |this |that )?on|"
                     r"activate)\b", re.I)


def both_ways(sentence: str) -> str:
    """The two ways of a switch one sentence says ("stop ... enable"), or "" when it says at most one."""
    off, on = _OFF_WAY.search(sentence), _ON_WAY.search(sentence)
    return f"{off.group(0)} ... {on.group(0)}" if off and on else ""


# The object of a question's action: the first word within _OBJECT_REACH after a verb that takes one, past these.
_TRANSITIVE = frozenset("""turn switch enable disable activate deactivate add invite remove delete kick cancel
share unshare lock unlock block unblock install uninstall archive unarchive hide unhide restore recover undelete
update replace swap""".split())
_OBJECT_SKIP = frozenset("""my the a an our your his her their all this that these those its old new whole entire
every everyone everybody right now some completely entirely fully single another second extra other nimbus drive
free personal team enterprise monthly yearly annual user users people person member members someone""".split())
_OBJECT_REACH = 3

# A question that says what it does not want done, or may not do ("but NOT delete my account", "without
# cancelling", "i don't want to delete it", "we're not allowed to install apps"), is not answered by the source
# whose action that is.
# "not" after these says how things are, not what is wanted ("photos are not backing up").
_STATE_WORDS = ("is", "are", "was", "were", "am", "its", "it's", "does", "did", "can", "will", "would", "should")
_REFUSED = re.compile(r"(?: not (?:allowed|permitted) to | without (?:me |us |you |them |anyone )?(?=[a-z]+ing )|"
                      r" (?:instead of|rather than|(?:sick|tired) of) (?:me |us )?(?=[a-z]+ing )|"
                      r" not (?:keen on|fond of|a fan of) (?=[a-z]+ing )| rather not |"
                      rf" {_NOT_WANTED} (?:to )?|"
                      + "".join(f"(?<! {re.escape(word)})" for word in _STATE_WORDS) + r" not (?:to )?)([a-z]+) ")

# An action the question calls a chore ("inviting everyone one by one is a pain") is one it wants to avoid.
_CHORE = re.compile(r" ([a-z]+ing) (?:[a-z0-9]+ ){0,5}(?:is|are|gets|seems) (?:such )?(?:a pain|a hassle|a nightmare|"
                    r"annoying|tedious|painful) ")

# Verbs that say little alone: a refusal of one refuses what follows it ("without me sending invites").
_LIGHT_VERBS = frozenset("""send sending do doing make making have having give giving get getting go going
create creating set setting""".split())

# A message's sentences, and the words that make one a question when it does not end in "?" (question_coverage).
_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+|\n+")
_QUESTION_OPENING = re.compile(r"\s*(?:how|what|whats|what's|where|why|when|which|who|can|could|do|does|did|is|are|"
                               r"will|would|should|any way|anyway)\b", re.I)
_IT = re.compile(r"\b(?:it|them)\b", re.I)
_DEMONSTRATIVE = re.compile(r"\b(?:that|this|those|these)\b\s*([a-z']*)", re.I)
# The known words a message's asking sentences need to be read alone (question_coverage).
ASKED_TERMS = 2



@dataclass(frozen=True)
class SourceCheck:
    """The verdict on one source for one question, with the reason staff read."""

    answers: bool
    coverage: float  # the weighted share of the question's known distinctive words the source uses
    reason: str


@dataclass(frozen=True)
class Coverage:
    """How much of a question's distinctive words a source must use: `least` always, or `least_close` when the
    retrieval found the source this close (`close`: its fused score) to the question, whose paraphrase shares
    fewer words ("cheapest paid option" for the price list)."""

    least: float
    least_close: float
    close: float

    def enough(self, coverage: float, score: float) -> bool:
        return coverage >= self.least or (score >= self.close and coverage >= self.least_close)


def check_source(question: str, source: str, vocabulary: Vocabulary, least: Coverage, score: float,
                 source_question: str = "") -> SourceCheck:
    """Whether `source` (an approved answer with its question, or an article), found with retrieval `score`,
    answers `question`. `source_question` is what an approved answer answers, read for its action's direction."""
    whole = f"{source_question}\n{source}"
    coverage, missing = question_coverage(question, whole, vocabulary)
    product = unknown_product(question, vocabulary)
    if product:
        return SourceCheck(False, coverage, f"names {product}, which the help centre never does")
    # An approved answer's question names its action; where it names none ("How do I back up my phone's
    # photos?"), its steps do ("tap Camera uploads and turn it on"), read as an article's text is.
    swapped = (swapped_action(question, source_question) if source_question else None) \
        or swapped_action(question, source)
    if swapped:
        return SourceCheck(False, coverage, f"asks to {swapped[0]}, the source is about {swapped[1]}")
    lead = source_question or source.split("\n", 1)[0]  # what the source is about: its question or title
    device = other_device(question, lead)
    if device:
        return SourceCheck(False, coverage, f"asks about a {device[0]}, the source is for a {device[1]}")
    unsaid = unsaid_action(question, whole)
    if unsaid:
        return SourceCheck(False, coverage, f"asks to {unsaid}, which the source never says")
    acted_on = unheld_object(question, whole, vocabulary)
    if acted_on:
        return SourceCheck(False, coverage, f"asks to act on {acted_on!r}, which the source never names")
    refused = refused_action(question, lead)
    if refused:
        return SourceCheck(False, coverage, f"asks not to {refused}, the source's own action")
    if not least.enough(coverage, score):
        shown = ", ".join(missing[:4]) or "nothing the help centre knows"
        return SourceCheck(False, coverage, f"covers {coverage:.0%} of the question (missing: {shown})")
    return SourceCheck(True, coverage, f"covers {coverage:.0%} of the question")


def question_coverage(question: str, source: str, vocabulary: Vocabulary) -> tuple[float, list[str]]:
    """The coverage of the whole message or of the sentences that ask, whichever is higher. A long message sets
    the scene before it asks ("one of our sales guys quit on friday. how do i get him off our team account"),
    and the scene's words need not be in the answer. The asking sentences alone count only when they hold
    ASKED_TERMS known words and name what they ask about ("how do i cancel it before they accept?" does not), and
    there a word the help centre never uses is likely the thing asked about ("does nimbus support webdav?"): it
    weighs as much as the rarest word it does use."""
    coverage, missing = term_coverage(question, source, vocabulary)
    asking = asking_sentences(question)
    if not asking or asking == question.strip() or leans_on_context(asking):
        return coverage, missing
    if len(known_terms(asking, vocabulary)) < ASKED_TERMS:
        return coverage, missing
    asked_coverage, asked_missing = term_coverage(asking, source, vocabulary, vocabulary.weight_of_rarest())
    return (asked_coverage, asked_missing) if asked_coverage > coverage else (coverage, missing)


def known_terms(text: str, vocabulary: Vocabulary) -> list[str]:
    """The text's terms the help centre uses, direction words aside: what it names that a source can be about."""
    return [term for term in vocabulary.terms(text) if vocabulary.weight(term) and term not in DIRECTION_WORDS]


def asking_sentences(message: str) -> str:
    """The sentences of a message that ask (ending in "?" or opening with a question word), or "" when none does."""
    units = [unit.strip() for unit in _SENTENCE_BREAK.split(message) if unit.strip()]
    return " ".join(unit for unit in units if unit.endswith("?") or _QUESTION_OPENING.match(unit))


def leans_on_context(sentence: str) -> bool:
    """Whether the sentence refers back to what the message said before: "it", "them", or "that" / "this" /
    "those" / "these" standing alone ("can i stack that on top", not "can i kick that session")."""
    if _IT.search(sentence):
        return True
    return any(not content_words(following) or following.lower() in DIRECTION_WORDS
               for following in _DEMONSTRATIVE.findall(sentence))


def term_coverage(question: str, source: str, vocabulary: Vocabulary,
                  unknown: float = 0.0) -> tuple[float, list[str]]:
    """The weighted share of the question's terms found in `source`, and the words missing from it; a word the
    help centre never uses weighs `unknown`."""
    found_in = stems(source)
    total = hit = 0.0
    missing = []
    # A word the help centre never uses weighs nothing: given weight, it handed off more covered questions (a
    # customer's chatter: "ugh", "mum") than it kept uncovered ones from passing (bench.answers, tuning part).
    # A direction word only costs a chatty question its source ("clearing out ... before i move ... back out").
    for term in vocabulary.terms(question):
        if term in DIRECTION_WORDS:
            continue
        weight = vocabulary.weight(term) or unknown
        total += weight
        if term in found_in:
            hit += weight
        elif weight:
            missing.append(term)
    return (hit / total if total else 0.0), missing


def unknown_product(question: str, vocabulary: Vocabulary) -> str:
    """A product, platform or offering the question names and the help centre never does ("Dropbox", "smart TV", "a
    family plan"): the question is about another company's product, one Nimbus has no app for or does not sell; ""
    when there is none. One it names (Okta, iPhone) is a word like any other."""
    asked = padded(question)
    for name in (*PRODUCTS, *PLATFORMS):
        if f" {name} " in asked and not vocabulary.mentions(name):
            return name
    for name in TOOLS:  # asked for, not named in passing ("my password manager got wiped")
        if _tool_regex(name).search(asked) and not vocabulary.mentions(name):
            return name
    for clause in _CLAUSE_BREAK.split(question):
        for name, kind in (found.groups() for found in _OFFERING.finditer(padded(clause))):
            named = [word for word in name.split() if word not in STOPWORDS and word not in _NOT_NAMES]
            if any(not any(map(vocabulary.known, vocabulary.terms(word))) for word in named):
                return f"{name} {kind}"
    return ""


@dataclass(frozen=True)
class AskedAction:
    """An action a question asks for: the phrase it says, that phrase's side of its OPPOSITES pair and the other."""

    phrase: str
    side: tuple[str, ...]
    opposite: tuple[str, ...]


def asked_actions(question: str) -> list[AskedAction]:
    """The actions the question asks for, one at most per side of each OPPOSITES pair. A question that says both
    sides wants the one it says last ("we turned it on but how do I switch it back off"), unless it says it does
    not want that one ("i know my password ... dont want to do the whole forgot password email thing")."""
    asked = padded(question)
    actions = []
    for one, other in OPPOSITES:
        for side, opposite in ((one, other), (other, one)):
            wants, where = said_at(asked, side)
            later = said_at(asked, opposite)[1]
            refused = _negated(asked, where)
            overruled = later > where and not _negated(asked, later)
            if not wants or refused or overruled or (wants in _RELATIVE and not _said_in_any_form(asked, opposite)):
                continue
            actions.append(AskedAction(wants, side, opposite))
    return actions


@functools.cache
def _tool_regex(name: str) -> re.Pattern:
    return re.compile(rf"{_ASKS_FOR} (?:[a-z]+ ){{0,4}}{re.escape(name)} ")


def swapped_action(question: str, source: str) -> tuple[str, str] | None:
    """(the question's action, the source's) where the source does the opposite of what is asked and never says
    the question's side."""
    given = padded(source)
    for action in asked_actions(question):
        said_side, said_opposite = said(given, action.side), said(given, action.opposite)
        if said_opposite and not said_side:
            return action.phrase, said_opposite
    return None


def _said_in_any_form(text: str, phrases: tuple[str, ...]) -> bool:
    """Whether `text` (padded) says one of the one-word `phrases` in any form ("deleted", "deletion" for "delete")."""
    stems_said = {stem(word) for word in text.split()}
    return any(stem(phrase) in stems_said for phrase in phrases if " " not in phrase)


def _negated(text: str, where: int) -> bool:
    """Whether the question says it does not want the phrase said at `where`."""
    return bool(_NEGATION.search(text[: where + 1]))


def unsaid_action(question: str, source: str) -> str:
    """The switch the question asks for ("turn off"), or the smaller plan, where the source switches nothing either
    way or changes no plan, or "": the storage answer's steps free space, and copied for "turn off camera uploads"
    they answer what was not asked. Other actions are said loosely ("forgot to cancel" wants a refund; "make the
    link stop" its expiry)."""
    asked, given = padded(question), padded(source)
    if DEVICE_SWITCH.search(asked):  # "every time i turn on my laptop": no switch of ours
        return ""
    switched = (*OPPOSITES[0][0], *OPPOSITES[0][1], *SWITCHED)
    for side, opposite in ((SWITCHES[0], SWITCHES[1]), (SWITCHES[1], SWITCHES[0])):
        wants, where = said_at(asked, side, base_only=True)
        if wants and said_at(asked, opposite)[1] < where and not said(given, switched):
            return wants
    down = _plan_down(asked)
    return down if down and not said(given, PLAN_CHANGED) else ""


def plan_down(question: str) -> str:
    """How the question asks to leave its plan for a smaller one ("go back down to personal"), or "": not where it
    supposes it ("and if i drop back down to free?" asks what Free allows)."""
    return _plan_down(padded(question))


def _plan_down(asked: str) -> str:
    down = _PLAN_DOWN.search(asked)
    if down is None or _SUPPOSED.search(asked[: down.start() + 1]):
        return ""
    return down.group(0).strip()


def unheld_object(question: str, source: str, vocabulary: Vocabulary) -> str:
    """What an action of the question acts on ("remove my credit card": credit) where the source never names it,
    or "": the account-deletion steps remove an account, not a card. A word the help centre never uses, or a
    pronoun ("turn it off"), says nothing."""
    asked, named = padded(question), stems(source)
    for pair in OPPOSITES:
        for phrase in (p for p in (*pair[0], *pair[1]) if p.partition(" ")[0] in _TRANSITIVE):
            for match in phrase_regex(phrase).finditer(asked):
                acted_on = _object(asked, match, phrase, vocabulary)
                if acted_on and acted_on[1] not in named:
                    return acted_on[0]
    return ""


def refused_action(question: str, lead: str) -> str:
    """What the question says it does not want done ("NOT deleting my account", "without me inviting", "sick of
    sending invites", "inviting everyone one by one is a pain": deleting, inviting) where that is the source's own
    action, the first word of its title or question (`lead`: "Delete your
    Nimbus Drive account"), or ""."""
    leading = content_words(lead)[:1]
    action = stem(leading[0]) if leading else ""
    asked = padded(question)
    for match in (*_REFUSED.finditer(asked), *_CHORE.finditer(asked)):
        refused = match.group(1)
        if refused in _LIGHT_VERBS:  # "without me sending 60 invites": what is refused is inviting
            refused = next((w for w in content_words(asked[match.end(1) :]) if w.isalpha()), refused)
        if action and stem(refused) == action:
            return refused
    return ""


def _object(asked: str, match: re.Match, phrase: str, vocabulary: Vocabulary) -> tuple[str, str] | None:
    """The word an action (`match` of `phrase` in the padded question) acts on, with its term, or None where it
    names none the help centre knows: the first word after the action within _OBJECT_REACH (between a verb and its
    particle when they stand apart, "turn 2fa off"), past the words of _OBJECT_SKIP."""
    following = asked[match.start() :].split()
    inside = match.group(0).split()[1:-1] if phrase.partition(" ")[2] in PARTICLES else []
    after = inside or following[len(phrase.split()) :]
    for word in after[:_OBJECT_REACH]:
        if word in _OBJECT_SKIP:
            continue
        if word in STOPWORDS or word in DIRECTION_WORDS:
            return None
        term = next(iter(vocabulary.terms(word)), "")
        return (word, term) if term and vocabulary.weight(term) else None
    return None
