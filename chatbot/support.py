"""Is this reply supported? Each sentence of a reply, checked against the sources in its prompt (the approved
answer, the help article, the conversation) before the customer sees it.

A sentence is supported when every fact it states appears in a source (numbers, prices, durations, URLs, e-mail
addresses, menu paths such as "Settings > Billing", and the control it tells the customer to click) and most of
its words are the sources' words. The first sentence that is not ends what the customer is shown: the reply
is cut there, never edited, so what is shown stays a prefix of the rule's own greedy reply.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .relevance import both_ways
from .terms import content_words, stem, stem_pairs, stems

# A sentence ends at a newline, or at . ! ? followed by a space (not a numbered list's "1." nor "e.g.").
_END = re.compile(r"\n+|(?<!\b[0-9])(?<!\be\.g)(?<!\bi\.e)[.!?]+(?=\s)")
LIST_MARK = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*•])\s+")
_STEP = re.compile(r"^\s*(\d{1,2})[.)]\s+(.*)$", re.M)  # a numbered step: its number and its text
NUMBER = re.compile(r"\$?\d[\d,]*(?:\.\d+)?%?")
_URL = re.compile(r"\b(?:https?://)?[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|org|net|io)(?:/[^\s]*)?", re.I)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_MENU = re.compile(r"\b[A-Z][\w ]*?(?: > [A-Z][\w ]*?)+(?=[.,;:)\s]|$)")
# The control a step tells the customer to use: "Click Set expiry date" names a button the source must name.
_CONTROL = re.compile(r"\b(?:click|tap|select|choose|press|turn on|turn off|open)(?:ing)?\s+(?:the\s+)?[\"“']?"
                      r"((?:[A-Z][\w'?]*)(?:\s+[\w'?]+){0,3})")
# ... and what a step clicks when it is no control's name ("click the link"): a source's step's word, not a near one.
_CLICKED = re.compile(r"\b(?i:click|tap|select|choose|press|pick|hit)(?:s|ed|ing)?\s+"
                      r"(?:(?:on|the|a|an|your|its|their)\s+)*([A-Za-z][\w'-]*)")
_CAPITALS = re.compile(r"\b[A-Z][A-Z0-9]+\b")  # an acronym or a code: the sources' own, or the customer's
_QUOTED = re.compile(r"[\"“]([^\"”\n]{2,60})[\"”]")
# The units of a period of time, as figures and passages read them ("30 days", "48 hours").
PERIOD_UNITS = r"(?:minutes?|hours?|days?|weeks?|months?|years?)"
# A figure with its unit ("10 GB", "1 month", "$8 per month"): the pair must be in a source, not just the number.
_FIGURE = re.compile(rf"(\$?\d[\d,]*(?:\.\d+)?)\s?(%|gb|tb|mb|kb|{PERIOD_UNITS}|users?|"
                     r"seats?|devices?|characters?|members?|business days?)\b", re.I)
# A price with what it is per ("$12 a user per month"): said so in a source, not just the figure ("The team plan is
# $120 per month" beside "$120 per user per year").
_PRICE_PER = re.compile(r"(\$\d[\d,]*(?:\.\d+)?)\s+(?:a|per|each|every)\s+(user|person|seat|member|month|year)\b"
                        r"(?:\s+(?:a|per|each|every)\s+(user|person|seat|member|month|year)\b)?", re.I)
# A sentence that answers yes or no states what no overlap of words can check: it must be a source's own sentence.
_YES_NO = re.compile(r"^(?:yes|no|yeah|nope|unfortunately|sure)\b", re.I)
# Words for the list check (`dropped_name`): a sentence of at least _LIST_COPY_WORDS that copies a source sentence
# but for up to _LIST_DROP_WORDS of its names.
_TOKEN = re.compile(r"[A-Za-z0-9$][\w$'-]*")
_LIST_COPY_WORDS, _LIST_DROP_WORDS = 5, 4
# The share of a sentence's words that may come from the customer's question alone: a reply may restate the question,
# but one mostly the question said back ("You can lock or freeze your account on purpose") claims what none says.
ECHO_SHARE = 0.25
_YES = re.compile(r"^\W*(?:yes|yeah|yep|sure|of course|absolutely)\b", re.I)
# A negation turns a sentence of a source's words into its opposite ("unlinking a desktop app is not possible" beside
# "Paid plans have no device limit"), which no overlap of words sees: what a sentence negates (the first word after
# the negation not in _NEGATED_SKIP) must follow a negation in a source, within _NEGATION_REACH words.
_NEGATION = re.compile(r"\b(?:not|no|never|nothing|none|nor|cannot|unable|(?:can|is|are|does|do|did|was|were|won|"
                       r"wouldn|couldn|shouldn|isn|aren|doesn|don|didn|wasn|haven|hasn)(?:'|’)?t)\b", re.I)
_NEGATED_SKIP = frozenset("""a an the be been being to it its any anything able have has had get got yet longer
always currently really also at all in on of for by with your you i we they this that those these one
more so very just""".split())
_NEGATION_REACH = 4
# Whose a thing is: "the folder disappears from your devices" copies every word of "... from their devices" and says
# it of someone else. What a sentence says is someone's must be said so in a source when a source says whose it is.
_POSSESSIVE = re.compile(r"\b(your|their|his|her|our|my)\s+(?:own\s+)?([a-z][a-z'-]*)", re.I)
_PERSON = {"your": "you", "my": "we", "our": "we", "their": "they", "his": "they", "her": "they"}  # "her" = "their"


@dataclass(frozen=True)
class Sentence:
    start: int  # characters of the reply text
    end: int

    def text(self, reply: str) -> str:
        return reply[self.start : self.end]


@dataclass(frozen=True)
class SentenceCheck:
    supported: bool
    overlap: float  # the share of its content words found in the sources
    reason: str  # why not, for staff; "" when supported
    pairs: float = 1.0  # the share of its consecutive content-word pairs found in the sources


def sentences(text: str, final: bool) -> list[Sentence]:
    """The complete sentences of `text`; the unfinished last one too when the reply has ended (`final`)."""
    found, start = [], 0
    for end in _END.finditer(text):
        if text[start : end.end()].strip():
            found.append(Sentence(start, end.end()))
        start = end.end()
    if final and text[start:].strip():
        found.append(Sentence(start, len(text)))
    return found


class Sources:
    """The texts a reply may draw on, indexed once per turn for the checks of its sentences."""

    def __init__(self, texts: Sequence[str], echo: str = "") -> None:
        """`texts` hold the facts; `echo` (the customer's question) only words: a reply may restate the question,
        not take a number or a menu path from it."""
        joined = "\n".join(texts)
        self.lower = " ".join(joined.lower().split())
        self.own_stems = stems(joined)
        self.stems = self.own_stems | stems(echo)
        self.words = set(re.findall(r"[a-z0-9]+", f"{joined}\n{echo}".lower()))
        self.pairs = stem_pairs(joined) | stem_pairs(echo)
        plain = "\n".join(LIST_MARK.sub("", line) for line in joined.splitlines())  # "1." is not a fact
        self.numbers = {_plain_number(n) for n in NUMBER.findall(plain)}
        self.sentences = [_TOKEN.findall(unit) for unit in text_sentences(plain)]
        self.clicked = {stem(word.lower()) for word in _CLICKED.findall(joined)}
        self.negated = {term for _, after in negated_words(joined, _NEGATION_REACH) for term in after}
        self.both_ways = any(map(both_ways, text_sentences(joined)))  # a source sentence saying both ways of a switch
        self.owners: dict[str, set[str]] = {}  # each thing a source says is someone's, with whose
        for owner, thing in _POSSESSIVE.findall(joined):
            self.owners.setdefault(stem(thing.lower()), set()).add(_PERSON[owner.lower()])
        numbered: dict[str, list[str]] = {}
        for number, step in _STEP.findall(joined):
            numbered.setdefault(number, []).append(step)
        # Each step number with the sources' steps of that number (a step's text holds no numbered step).
        self.steps = {number: Sources(steps) for number, steps in numbered.items()}

    def holds(self, phrase: str) -> bool:
        return " ".join(phrase.lower().split()) in self.lower


def check_sentence(sentence: str, sources: Sources, min_overlap: float, min_pairs: float = 0.0) -> SentenceCheck:
    """Whether every fact of `sentence` is in `sources`, at least `min_overlap` of its words are, and at least
    `min_pairs` of its consecutive word pairs."""
    body = LIST_MARK.sub("", sentence).strip()
    missing = unsupported_fact(body, sources)
    swapped_step = "" if missing else unsupported_step(sentence, sources)
    if not missing and _YES_NO.match(body) and not sources.holds(body.rstrip(".!")):
        missing = body.split()[0].strip(",.!")
    negated = "" if missing else unsupported_negation(body, sources)
    words = [w for w in content_words(body) if not w.isdigit()]
    word_stems = [stem(w) for w in words]
    found = sum(1 for term in word_stems if term in sources.stems)
    overlap = found / len(words) if words else 1.0
    pairs = stem_pairs(body)
    paired = sum(1 for pair in pairs if pair in sources.pairs) / len(pairs) if pairs else 1.0
    if missing:
        return SentenceCheck(False, overlap, f"{missing!r} is in no source", paired)
    if swapped_step:
        return SentenceCheck(False, overlap, f"{swapped_step}, which no source's step of that number does", paired)
    if not missing and not sources.both_ways and (contrary := both_ways(body)):
        return SentenceCheck(False, overlap, f"says {contrary!r}, which no source says in one sentence", paired)
    if negated:
        return SentenceCheck(False, overlap, f"says {negated!r}, which no source negates", paired)
    owner = swapped_owner(body, sources)
    if owner:
        return SentenceCheck(False, overlap, f"says {owner!r}, which the sources say of someone else", paired)
    dropped = dropped_name(body, sources)
    if dropped:
        return SentenceCheck(False, overlap, f"leaves {dropped!r} out of its source's list", paired)
    if overlap < min_overlap:
        return SentenceCheck(False, overlap, f"{overlap:.0%} of its words are in the sources", paired)
    echoed = [w for w, term in zip(words, word_stems, strict=True)
              if term in sources.stems and term not in sources.own_stems]
    if min_overlap and len(echoed) > ECHO_SHARE * len(words):  # a check of the words at all
        return SentenceCheck(False, overlap, f"takes {', '.join(echoed[:3])!r} from the question alone", paired)
    if paired < min_pairs:
        return SentenceCheck(False, overlap, f"{paired:.0%} of its word pairs are in the sources", paired)
    return SentenceCheck(True, overlap, "", paired)


def unsupported_fact(sentence: str, sources: Sources) -> str:
    """The first number, URL, e-mail address, menu path, named control or word in capitals ("VAT ID" written
    "VATID") of `sentence` that no source holds."""
    for number in NUMBER.findall(sentence):
        if _plain_number(number) not in sources.numbers:
            return number
    for pattern in (_EMAIL, _URL, _MENU):
        for fact in pattern.findall(sentence):
            if not sources.holds(fact.rstrip(".")):
                return fact
    for control in map(_control_name, _CONTROL.findall(sentence)):
        if not sources.holds(control):
            return control
    for step in _CLICKED.finditer(sentence):
        clicked = step.group(1)
        if clicked[0].islower() and stem(clicked) not in sources.clicked:
            return step.group(0)
    for quoted in _QUOTED.findall(sentence):
        if not sources.holds(quoted.strip(" .,")):
            return quoted
    for number, unit in _FIGURE.findall(sentence):
        if not (sources.holds(f"{number} {unit}") or sources.holds(f"{number}{unit}")):
            return f"{number} {unit}"
    for amount, *pers in _PRICE_PER.findall(sentence):
        pers = ["user" if per.lower() in ("person", "seat", "member") else per.lower() for per in pers if per]
        said = [f"{amount} per {' per '.join(order)}" for order in (pers, pers[::-1])]
        if not any(sources.holds(price) for price in said):
            return said[0]
    for capitals in _CAPITALS.findall(sentence):
        if capitals.lower() not in sources.words:
            return capitals
    return ""


def swapped_owner(sentence: str, sources: Sources) -> str:
    """The first thing `sentence` says is someone's ("your devices") that the sources say only of someone else
    ("their devices"), or ""."""
    for owner, thing in _POSSESSIVE.findall(sentence):
        whose = sources.owners.get(stem(thing.lower()))
        if whose and _PERSON[owner.lower()] not in whose:
            return f"{owner} {thing}"
    return ""


def unsupported_step(sentence: str, sources: Sources) -> str:
    """What a numbered step clicks that no source's step of that number does ("4. Click Delete" for "Empty trash")."""
    numbered = _STEP.match(sentence)
    if not numbered or numbered.group(1) not in sources.steps:
        return ""
    number, step = numbered.groups()
    said, steps = step.strip().rstrip("."), sources.steps[number]
    # A source's later step under this number, where no source's step of this number says it: the model left a
    # step of the procedure out ("3. Click Save" after step 2, the password step gone). A list that is no procedure
    # ("1. Personal: $8 per month") may leave items out.
    if (_CONTROL.search(step) or _CLICKED.search(step)) and not steps.holds(said):
        later = min((int(at) for at, others in sources.steps.items() if int(at) > int(number) and others.holds(said)),
                    default=0)
        if later:
            return f"step {number} says step {later}'s words"
    if sources.holds(said):  # a source's own words, numbered: "2. Click Revoke next to the key"
        return ""
    for control in map(_control_name, _CONTROL.findall(step)):
        if not steps.holds(control):
            return f"step {number} uses {control!r}"
    for clicked in _CLICKED.finditer(step):
        if stem(clicked.group(1).lower()) not in steps.clicked:
            return f"step {number} does {clicked.group(0)!r}"
    return ""


def _control_name(control: str) -> str:
    """The first two words of a named control ("Set expiry date" -> "Set expiry"), as a source must hold them."""
    return " ".join(control.split()[:2]).rstrip(".,\"”")


def negated_words(text: str, reach: int) -> list[tuple[str, list[str]]]:
    """Each negation of `text` with the stems of the `reach` words after it that are not in _NEGATED_SKIP (within
    its clause)."""
    found = []
    for match in _NEGATION.finditer(text):
        clause = re.split(r"[.,;:!?\n]", text[match.end() :], maxsplit=1)[0]
        after = [w for w in re.findall(r"[a-z0-9]+", clause.lower()) if w not in _NEGATED_SKIP]
        found.append((match.group(0), [stem(w) for w in after[:reach]]))
    return found


def unsupported_negation(sentence: str, sources: Sources) -> str:
    """The first negation of `sentence` with what it negates ("not possible") that no source negates, or ""."""
    for negation, after in negated_words(sentence, 1):
        if after and after[0] not in sources.negated:
            return f"{negation} ... {after[0]}"
    return ""


def dropped_name(sentence: str, sources: Sources) -> str:
    """A name (a capitalised word) that `sentence` leaves out of a source sentence it otherwise copies word for
    word, or "": "available on Team and Enterprise plans" where the source says "Personal, Team and Enterprise"
    states every word the source does and says something else."""
    said = [token.lower() for token in _TOKEN.findall(sentence)]
    if len(said) < _LIST_COPY_WORDS:
        return ""
    for source in sources.sentences:
        if not 0 < len(source) - len(said) <= _LIST_DROP_WORDS:
            continue
        left, at = [], 0
        for index, token in enumerate(source):
            if at < len(said) and token.lower() == said[at]:
                at += 1
            else:
                left.append(token if index else token.lower())  # a sentence's first word is no name
        names = [token for token in left if token[0].isupper()]
        if at == len(said) and names and all(token[0].isupper() or token in ("and", "or") for token in left):
            return names[0]
    return ""


def _plain_number(number: str) -> str:
    return number.replace(",", "").rstrip(".")


def text_sentences(text: str) -> list[str]:
    """The sentences of a text (an article's body, an answer), stripped, in order."""
    return [unit for unit in (text[s.start : s.end].strip() for s in sentences(text, final=True)) if unit]


@dataclass(frozen=True)
class CheckedSentence:
    """One sentence of a reply as the check saw it, kept with the reply for staff and for the evaluation."""

    end: int  # where it ends in the reply text
    overlap: float
    reason: str  # why it is not supported; "" when it is
    pairs: float = 1.0
    says_yes: bool = False  # it opens with "Yes": read with `reason`, a yes no source gives


NOTHING_SAID = "says nothing"


def says_nothing(sentence: str) -> bool:
    """Whether a sentence holds no word that carries meaning ("A:", "Hi there!"): the overlap checks pass it, having
    nothing to check. The model wrote a whole reply of "A: A: A:" lines after a staff-text reply."""
    return not [word for word in content_words(LIST_MARK.sub("", sentence)) if len(word) > 1]


class ReplyCheck:
    """Checks a growing reply sentence by sentence and says how much of it may be shown.

    Text is held back until its sentence is complete and checked, so nothing shown is ever withdrawn. The first
    unsupported sentence ends what is shown (`failed`); with `enforce` off every sentence is still checked and
    recorded (the evaluation's curve), and nothing is cut."""

    def __init__(self, sources: Sources, min_overlap: float, enforce: bool = True, min_pairs: float = 0.0) -> None:
        self.sources, self.min_overlap, self.min_pairs, self.enforce = sources, min_overlap, min_pairs, enforce
        self.checked: list[CheckedSentence] = []
        self.failed: CheckedSentence | None = None
        self.shown_end = 0

    def feed(self, text: str, final: bool) -> int:
        """How many characters of `text` (the reply so far) may be shown."""
        done = self.checked[-1].end if self.checked else 0
        for sentence in sentences(text, final):
            if sentence.end <= done:
                continue
            said = sentence.text(text)
            verdict = check_sentence(said, self.sources, self.min_overlap, self.min_pairs)
            self.checked.append(CheckedSentence(sentence.end, round(verdict.overlap, 3), verdict.reason,
                                                round(verdict.pairs, 3), bool(_YES.match(said))))
            if self.failed is None and not verdict.supported:
                self.failed = self.checked[-1]
            if self.cut:
                break
            if self.enforce and says_nothing(said):
                continue  # held back until a sentence that says something follows it
            self.shown_end = sentence.end
        if final and self.enforce and not self.cut and self.checked:
            if self.shown_end == 0:  # the whole reply says nothing ("A: A: A:"): not an answer
                self.failed = replace(self.checked[0], reason=NOTHING_SAID)
            else:
                self.shown_end = self.checked[-1].end
        return self.shown_end

    @property
    def cut(self) -> bool:
        """True once a sentence failed and the check enforces: decoding can stop, nothing more is shown."""
        return self.enforce and self.failed is not None
