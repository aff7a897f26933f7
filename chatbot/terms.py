"""The words of the help centre: which of a question's words are distinctive, found by their rarity there.

Pure text, no model: a customer's word is lowered, stemmed (Snowball's English stemmer, then its first five
letters, so "sharing" meets "share" and "subscription" meets "subscribe") and, when the help centre never uses it,
mapped to the nearest word it does use when that is a likely typo ("pasword": a word the model's tokenizer splits;
"project" is not the help centre's "protect"). Both checks (chatbot/relevance.py, chatbot/support.py) read it.
"""

import difflib
import functools
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cache.lexical import english_stemmer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STEM_LETTERS = 5
# Words that say which way an action goes, not what it acts on ("turn it off", "back out"): the direction test
# (chatbot/relevance.py) reads them in the raw text; they are no stopwords, so a reply sentence's "off" must be a
# source's, but they weigh nothing in a question's coverage.
DIRECTION_WORDS = frozenset({"on", "off", "out", "up", "down", "back", "no", "not"})
# Function words and chat filler: they say nothing about which answer a question needs.
STOPWORDS = frozenset("""
a about above after again all also am an and any anymore anything are as at be been before being below between
both but by can could did do does doing don't done down during each either else even ever every few for from
further get gets getting go going got had has have having he her here hers him his how i i'd i'm i've if in into
is isn't it it's its itself just let let's like me mine more most much must my myself need needs no nor not now
of off on once one only or other our ours out over own please pls plz same she should so some still such sure
than thank thanks that that's the their theirs them then there these they this those through thx to too try
trying u under until up us very want wanted wants was way we were what what's when where which while who whom
why will with won't would yes yet you your yours yourself hi hello hey help okay ok guys anyone someone really
actually maybe cant can't dont doesnt doesn't didn't im ive thats whats wanna gonna something thing things tell
know idea possible also again supposed
""".split()) - DIRECTION_WORDS


# Customers' words for what the help centre calls otherwise, replaced before anything is compared (both sides).
SYNONYMS = {
    "log in": "sign in", "log into": "sign in to", "logged into": "signed in to", "logging in": "signing in",
    "login": "sign in", "logon": "sign in", "log on": "sign in", "logged in": "signed in",
    "log out": "sign out", "logout": "sign out", "logged out": "signed out", "signin": "sign in",
    "pw": "password", "pwd": "password", "passwd": "password", "passcode": "password",
    "2fa": "two-factor", "mfa": "two-factor", "2 factor": "two-factor", "two factor": "two-factor",
    "money back": "refund", "reimburse": "refund", "pics": "photos", "pictures": "photos",
    "computer": "desktop", "laptop": "desktop", "pc": "desktop", "mac": "desktop",
    "cell": "phone", "mobile phone": "phone", "sso": "single sign-on", "single sign on": "single sign-on",
    "bin": "trash", "recycle bin": "trash", "deleted": "delete", "erase": "delete",
    "coworker": "colleague", "co-worker": "colleague", "teammate": "team member",
    "subscription": "plan", "membership": "plan", "yearly": "annual", "annually": "annual",
}
# The customers' short forms among them that the embedding models read as noise ("forgot my pw"): spelled out
# before a question is retrieved. Not "2fa" nor "sso", which they read well: spelled out, on all 13 sets, 3 right
# replies turned wrong.
SHORT_FORMS = ("pw", "pwd", "passwd", "pics")
_SHORT_FORM = re.compile(r"\b(" + "|".join(SHORT_FORMS) + r")\b", re.I)
_SYNONYM = re.compile(r"\b(" + "|".join(sorted(map(re.escape, SYNONYMS), key=len, reverse=True)) + r")\b")


def stem(word: str) -> str:
    """English (Snowball) stem, then its first STEM_LETTERS letters: "paying" meets "pay", "saved" meets "save" and
    "subscription" meets "subscribe" (a crude suffix list left "payin" and "saved" apart from the help centre's
    words, which cost covered questions their source)."""
    return english_stemmer().stemWord(word)[:STEM_LETTERS]  # this thread's: PyStemmer's are not thread-safe


def words(text: str) -> list[str]:
    text = _SYNONYM.sub(lambda m: SYNONYMS[m.group(1)], text.lower().replace("’", "'"))
    return WORD.findall(text)


def spelled_out(text: str) -> str:
    """`text` with the customer's short forms in the help centre's words, the rest as written."""
    return _SHORT_FORM.sub(lambda m: SYNONYMS[m.group(1).lower()], text)


def content_words(text: str) -> list[str]:
    """The words of `text` that can carry meaning: no stopwords, no lone digits of a numbered list."""
    return [w for w in words(text) if w not in STOPWORDS and not (w.isdigit() and len(w) == 1)]


def stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}


def stem_pairs(text: str) -> set[tuple[str, str]]:
    """Consecutive content stems, line by line: a sentence whose words all occur in the sources but in no such
    pairs ("create a SAML account on the company's server") says something the sources do not."""
    pairs = set()
    for line in text.splitlines():
        found = [stem(w) for w in content_words(line)]
        pairs.update(zip(found, found[1:], strict=False))
    return pairs


def no_word_known(word: str) -> bool:
    """Without a tokenizer's words: every unknown word may be a typo."""
    return False


@dataclass
class Vocabulary:
    """Document frequencies of the help centre's stems (each article, each approved answer a document)."""

    documents: int
    frequency: dict[str, int]
    surface: dict[str, str] = field(default_factory=dict)  # a used word -> its stem, for typo lookup
    text: str = ""  # all of it, lowered, one space between words: for the names it mentions ("google drive")
    # Whether a word is a word of the language, not a typo: a word the help centre does not use is then not taken for
    # one it does ("project" for "protect", "sitting" for "setting", "remember" for "member").
    is_word: Callable[[str], bool] = field(default=no_word_known, repr=False, compare=False)

    @classmethod
    def of(cls, texts: Iterable[str], is_word: Callable[[str], bool] = no_word_known) -> "Vocabulary":
        frequency: dict[str, int] = {}
        surface: dict[str, str] = {}
        count, lowered = 0, []
        for text in texts:
            count += 1
            lowered.append(" ".join(text.lower().split()))
            for word in set(content_words(text)):
                surface[word] = stem(word)
            for term in stems(text):
                frequency[term] = frequency.get(term, 0) + 1
        return cls(count, frequency, surface, "\n".join(lowered), is_word)

    def mentions(self, name: str) -> bool:
        """Whether the help centre names `name` anywhere (a phrase, lowered)."""
        return f" {name} " in f" {self.text} "

    def known(self, term: str) -> bool:
        return term in self.frequency

    def weight(self, term: str) -> float:
        """The term's rarity in the help centre (inverse document frequency); 0 for a term it never uses."""
        df = self.frequency.get(term, 0)
        return math.log((self.documents + 1) / df) if df else 0.0

    def weight_of_rarest(self) -> float:
        """The weight of a term used once in the help centre."""
        return math.log(self.documents + 1)

    def rare(self, term: str, documents: int) -> bool:
        """Whether the help centre uses `term`, in at most `documents` of its articles and approved answers."""
        return 0 < self.frequency.get(term, 0) <= documents

    def terms(self, text: str) -> list[str]:
        """The content stems of a customer's text, a likely typo mapped to the help centre's word."""
        found: list[str] = []
        for word in content_words(text):
            term = stem(word)
            if not self.known(term) and len(word) >= 5 and not self.is_word(word):
                near = difflib.get_close_matches(word, self.surface, n=1, cutoff=0.85)
                term = self.surface[near[0]] if near else term
            if term not in found:
                found.append(term)
        return found


def whole_words(tokenizer: "PreTrainedTokenizerBase") -> Callable[[str], bool]:
    """Whether a word is one token of `tokenizer` after a space: a byte-pair vocabulary keeps its language's
    common words whole and splits typos ("pasword": " pas" + "word"). A tokenizer that does not (it splits
    "account", or keeps "pasword") says no word is one, and every unknown word may be a typo, as before."""
    @functools.lru_cache(maxsize=65536)
    def is_word(word: str) -> bool:
        return len(tokenizer(" " + word, add_special_tokens=False)["input_ids"]) == 1

    if not is_word("account") or is_word("pasword"):
        logger.warning("the tokenizer does not keep English words whole: every unknown word may be a typo")
        return no_word_known
    return is_word
