"""What a question is before anything answers it: text fit to ask, one to decline, one that needs a sum, a
follow-up, and the help centre's words it is measured against."""

import re
from collections.abc import Callable
from dataclasses import dataclass

from cache import AnswerCache
from cache.records import ArticleRecord

from .actions import padded, said
from .prompt import InputError, Message, clean_text
from .sums import asks_a_count, asks_for_add_on, asks_more_by_the_month
from .support import text_sentences
from .terms import Vocabulary, stems

# Messages that try to change the assistant's instructions: declined, never decoded. The 135M model follows
# "ignore your instructions" as readily as a question. Besides the classic overrides, what marks one is the
# message speaking to the assistant about how it must answer (a role label, "as the assistant you must
# confirm", "repeat exactly ... and nothing else", "from now on always"), claiming to update the help centre or
# its policy, or asking for another person's codes or password.
_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:instructions?|rules|prompt|guidelines|above|previous)\b"
    r"|\bsystem prompt\b|\bdeveloper mode\b|\bjailbreak\b|\bpretend (?:you(?:'re| are)|to be)\b"
    r"|\b(?:you are|you're|act as|become|pretend to be)\s+(?:now\s+)?dan\b|\bdo anything now\b"
    r"|\bnote[\s-]+to[\s-]+(?:the[\s-]+)?(?:ai|assistants?|bots?|chatbots?|llms?|models?)\b"
    r"|\byou are now\b|\bact as (?:an? )?(?:admin|administrator|developer|root|system)\b"
    r"|\bsystem (?:override|message|instruction)\b|(?:^|[\[(\n]|<!--)\s*system (?:notice|notification|alert)\b"
    r"|\b(?:admin|agent|developer|god|sudo|debug|support|staff|test|maintenance) mode\b"
    r"|\bmode\s*[:=]?\s*(?:enabled|activated|on)\b|\bnew (?:instructions?|rules?|polic(?:y|ies))\b"
    r"|\b(?:reveal|print|show|repeat|output|share|dump|leak)\b.{0,30}\b(?:instructions|prompt|configuration|"
    r"secrets?|api keys?)\b"
    r"|\b(?:repeat|print|output|dump|recite|copy)\b.{0,60}\b(?:verbatim|word for word)\b"
    r"|\b(?:verbatim|word for word)\b.{0,60}\b(?:instructions|prompt)\b"
    r"|(?:^|[\[(\n]|<!--|[.!?]\s)\s*(?:ai\s+)?(?:assistant|system|bot|ai|chatbot)\s*:"
    r"|(?:^|[.!?;]\s|\s--?\s)\s*(?:ai\s+)?(?:assistant|bot|chatbot),\s+(?:please\s+)?(?:confirm|tell|say|reply|"
    r"respond|answer|write|state|inform|announce)\b"
    r"|\bthe user is (?:a\s+)?(?:verified|authori[sz]ed|trusted)\s+(?:staff|admin|administrator|agent|employee)\b"
    r"|\bas (?:the|a|an|our|my) (?:support |helpdesk |customer service )?(?:assistant|bot|chatbot|ai|agent)\b"
    r".{0,40}\b(?:must|have to|need to|are required to|should|will)\b"
    r"|\byou (?:must|are required to|have to) (?:confirm|say|state|reply|respond|answer|repeat|write|promise|"
    r"agree|tell (?:me|users|customers|everyone))\b"
    r"|\b(?:repeat|say|type|write|output|print|reply|respond)(?: with)?\b.{0,30}\b(?:exactly|verbatim|"
    r"word for word|after me)\b|\band nothing else\b|\bconfirm (?:it )?in writing\b"
    r"|\byou(?:'re| are) (?:now |hereby )?(?:authori[sz]ed|allowed|permitted|cleared) to\b"
    r"|(?<!\bdo )(?<!\bcan )\bi (?:hereby )?(?:authori[sz]e|instruct|order|permit) you to\b"
    r"|(?:^|[.,:;!]\s*)(?:as (?:the|an?|my) \w+,? )?(?:you|u) (?:now )?(?:have|hold) (?:the |full )?"
    r"(?:authority|permission|clearance|power) to\b"
    r"|\bfrom now on,? (?:you|always|answer|reply|respond|say|tell|end|start)\b"
    r"|\b(?:always|only) (?:use|trust|follow) (?:this|these|the new|the updated|my)\b"
    r"|\b(?:help ?cent(?:re|er)|policy|pricing|terms) updated?\b|\beffective (?:today|immediately|now)\b"
    r"|\b(?:recovery codes?|backup codes?|password|2fa codes?|two-factor codes?)\b[^.?!]{0,40}"
    r"\b(?:for|of) [\w.+-]+@[\w-]+\.[\w.]+",
    re.I | re.S,
)
# A message that claims to come from Nimbus's own staff ("this is Mark from Nimbus billing", "internal escalation")
# and tells the assistant to do something (confirm, apply, refund): declined as an instruction, unless it asks to
# act on an account (ACTS_ON_ACCOUNT's message says more then). Not a claim the customer reports ("someone called
# saying this is Mark from Nimbus security, is that legit?"), nor a how-to of their own ("this is urgent from nimbus
# billing, how do I get a refund"): the help centre answers those.
_STAFF_CLAIM = re.compile(
    r"\b(?:this is|i am|i'm|im)\s+(?:[a-z]+\s+){1,2}?from (?:the )?nimbus(?: drive)?(?:'s)?(?: tier \d)? "
    r"(?:billing|support|security|staff|engineering|legal|management)\b"
    r"|\bas (?:a|an|the|your) nimbus(?: drive)? (?:billing|support|security) (?:agent|admin|administrator|staff|lead|"
    r"team member|employee|manager|rep)\b"
    r"|\b[a-z]+ here from nimbus\b|\bnimbus (?:billing|support|security)(?: team| agent| staff)? here\b"
    r"|\binternal (?:test|override|escalation)\b|\b(?:staff|agent|admin) override\b",
    re.I,
)
_STAFF_ORDER = re.compile(r"\b(?:confirm|apply|approve|process|issue|grant|credit|upgrade|disable|paste|refund)\b",
                          re.I)
_CUSTOMER_VOICE = re.compile(r"\b(?:e-?mails?|messages?|texted|call(?:ed|ing)?|phoned|says|said|saying|legit|real|"
                             r"scam|phishing|fake|genuine|suspicious|why|posing|pretending|claiming)\b"
                             r"|\bhow (?:do|can|would|should) (?:i|we)\b", re.I)
# Messages that ask the assistant to act on an account's sign-in: to sign in for the customer, to read out or send
# codes or login details, to reset or open another person's account, or to confirm what an account holds (its
# e-mail, card, address); and messages that hand over a password.
# The assistant can do none of these, and the closest article ("Lost your phone or 2FA device") read as if it
# could: declined, with a warning not to share credentials. Asking *how* ("how do I reset a member's 2FA as an
# admin?") is a question, not this.
_CODES = (r"(?:recovery|backup|2fa|two-factor|verification|login|sign-in) codes?|login (?:details|info)|"
          r"sign-in details|credentials")
# Someone close whose account a customer may want into without them ("my ex's drive").
_CLOSE = r"my (?:wife|husband|partner|ex|ex-\w+|girlfriend|boyfriend|roommate|flatmate|neighbou?r)'?s"
_OTHERS = (r"(?:her|his|their|my (?:colleague|co-?worker|boss|employee|manager|friend|mum|mom|dad|son|daughter|"
           rf"brother|sister)'?s|{_CLOSE}|[\w.+-]+@[\w-]+\.[\w.]+'?s?)")
# Keys that would open any customer's account, asked of Nimbus ("whats the master admin password you guys use"):
# never given. A customer's own ("the master password of my password manager") is another matter.
_MASTER_KEYS = (r"(?:master|internal|backdoor|back-door|skeleton|universal)\s+(?:admin\s+)?"
                r"(?:passwords?|api\s?keys?|keys?|credentials)")
_NIMBUS_SIDE = r"(?:you|you guys|your|nimbus|staff|support|employees|admins)"
# The assistant asked to do it ("can you", "please", "just", "i need you to", or an order opening a sentence).
_ASKED = (r"(?:\b(?:can|could|would|will) (?:you|u|support)|\b(?:please|pls|just)|\bi need you to"
          r"|(?:^|[.!?]\s+))")
_SIGN_IN = r"(?:log|sign)[\s-]?(?:in|into|on)\b"
# What an account holds about its owner ("confirm the email, plan and last 4 card digits on the account x@y.com").
_ACCOUNT_DATA = (r"(?:card|last (?:4|four)|billing (?:details|address|info)|payment details|e-?mail(?: address)?|"
                 r"phone(?: number)?|address)")
_ACTS_ON_ACCOUNT = re.compile(
    rf"\bhere(?:'s| is) my (?:password|pw|passcode|{_CODES})\b"
    r"|\b(?:my|her|his|their) (?:password|pw) (?:is|=)\s*[:\"']?\s*(?=\S*\d|\S*[!@#$%^&*][^\s!?.,])\S{6,}"
    rf"|\b(?:log|sign) me (?:in|into|on)\b|\b{_SIGN_IN}(?:\s+(?:to|into))?(?:\s+(?:my|her|his|their)(?:\s+\w+)?)?"
    r"\s+(?:for me|as me|on my behalf)\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?(?:{_SIGN_IN}|access|go into|get into)\s*(?:to\s+)?(?:my|her|his|their)\s+"
    r"(?:nimbus\s+)?(?:account|drive)\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?{_SIGN_IN}\s+as\s+(?:her|him|them|[\w.+-]+@[\w-]+\.[\w.]+)\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?(?:read|send|give|tell|e-?mail|text)(?: me| us)?(?: back)?(?: out)?\s+"
    rf"(?:my|the|her|his|their)\s+(?:new\s+)?(?:{_CODES})\b"
    rf"|\b(?:e-?mail|send|text|forward)\s+(?:your|their|his|her|my)\s+(?:{_CODES})\s+to\b"
    rf"|\bwhat (?:are|is) my (?:{_CODES}|password)\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?send\s+(?:me\s+|us\s+)?(?:the\s+|a\s+|his\s+|her\s+|their\s+)?"
    r"(?:password\s+)?reset\s+(?:link|e-?mail|code)\s+to\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?(?:reset|disable|turn off|remove|unlock|change|open|access)\s+{_OTHERS}\s+"
    r"(?:nimbus\s+)?(?:account|two-factor|2fa|password|login|drive)"
    rf"|\b(?:need|want) (?:me )?in(?:to)?\s+{_OTHERS}\s+(?:nimbus\s+)?(?:account|drive)"
    rf"|\b(?:need|want) to get in(?:to)?\s+{_CLOSE}\s+(?:nimbus\s+)?(?:account|drive)"
    rf"|\b(?:your|nimbus'?s?)\s+(?:own\s+)?{_MASTER_KEYS}\b"
    rf"|\b{_MASTER_KEYS}\b[^.?!,]{{0,30}}\b{_NIMBUS_SIDE}(?: \w+){{0,2}} (?:use|have|keep)\b"
    rf"|{_ASKED}\s*(?:please\s+)?(?:just\s+)?(?:confirm|verify|tell|give|read(?: out)?|send|share)\b[^.?!]{{0,60}}"
    rf"\b{_ACCOUNT_DATA}\b[^.?!]{{0,40}}\b(?:on|of|for|in)\s+(?:(?:the|this|that|her|his|their)\s+)?"
    r"(?:account\b|[\w.+-]+@[\w-]+\.[\w.]+)",
    re.I | re.S,
)
# What the staff see as the reason for each decline; chatbot/shown.py picks the customer's message by it.
CHANGES_INSTRUCTIONS = "tries to change the assistant's instructions"
ACTS_ON_ACCOUNT = "asks the assistant to act on an account's sign-in or codes"
# A sum: a price asked for a count of seats or months (chatbot/sums.py reads them), or two billing periods compared.
# ... asked as an amount: "I pay by card for 25 seats" asks no sum, nor "saving every file by hand".
_PRICE = re.compile(r"\b(?:cost|costs|price|prices|how much|total|spend|savings|cheaper|expensive|bill|"
                    r"run (?:me|us)(?! through)|come to|comes to|altogether|all together|in total|"
                    r"what (?:would|will|do|does|should) (?:\w+ ){0,4}pay)\b"  # "what would 5 of us pay a year"
                    # a price stated to be confirmed ("2 of us, so team would be like $24 a month right?")
                    r"|\$\d[\d,.]*\s*(?:a|per|/|each)\s*(?:month|mo|year|yr|user|person|seat)\b", re.I)
# ... or an add-on priced on top of a plan ("if I add the extra storage, what's my monthly total?").
_ADDED = re.compile(r"\b(?:add|adding|added|add-on|extra|on top of|plus)\b.*"
                    r"\b(?:total|how much|costs?|come to|comes to|altogether|all together|"
                    r"what(?:'s| is| would| will) (?:my |the |our )?(?:monthly |yearly |annual |new )?bill)\b"
                    r"|\b(?:total|how much|costs?)\b.*\b(?:add|adding|add-on|extra|plus)\b",
                    re.I | re.S)
_COMPARE = re.compile(r"\b(?:difference|compared?|versus|vs\.?|instead of|rather than|than)\b", re.I)
# ... or a saving between billing periods ("how much do I save a year if I switch Personal to annual", "is monthly
# or yearly cheaper").
_SAVING = re.compile(r"\b(?:sav(?:e|es|ing)|cheaper)\b.*\b(?:annual|annually|yearly|monthly)\b"
                     r"|\b(?:annual|annually|yearly|monthly)\b.*\b(?:sav(?:e|es|ing)|cheaper)\b", re.I | re.S)
# ... and asks for an amount: "I was charged $8, I want the difference refunded" is a complaint for staff.
_ASKS_AMOUNT = re.compile(r"\?|\b(?:how much|total|what(?:'s| is| would| will| does| do| am i| are we)|whats|costs?|"
                          r"cheaper|sav(?:e|es|ing|ings)|price (?:for|of)|pay (?:for|per|each|a|in))\b", re.I)


def _staff_asked(you: str = "you") -> str:
    """Staff asked to do something for the account: "can you", "could someone please"."""
    return rf"\b(?:can|could|would|will)\s+(?:{you}|u|someone|support|your team)\s+(?:please\s+|pls\s+|just\s+)?"


_STAFF_ASKED = _staff_asked()
_STAFF_ASKED_ANY_YOU = _staff_asked(r"you(?:\s+guys)?")  # "can you guys give us another week"
# A question about the customer's own records, which only staff can look up or change: an invoice, order or
# ticket number, or "which e-mail did I use", "check my account". The help centre answers how things work, never
# what one account holds, and the nearest how-to is not an answer to it.
_OWN_RECORDS = re.compile(
    r"\b(?:NMB|INV|ORD)-?\d{3,}\b|#\s?\d{3,}\b"
    r"|\b(?:order|invoice|ticket|case|receipt|transaction)\s+(?:number\s+|no\.?\s*|#\s*)?[A-Z0-9-]*\d{4,}\b"
    r"|\b(?:which|what)\s+(?:e-?mail|address|account|plan|card)\s+(?:did\s+i|i\s+used?|i\s+signed|am\s+i|is\s+(?:my|on\s+my))"
    r"|\b(?:look\s+up|look\s+into|check|pull\s+up)\s+my\s+(?:account|order|invoice|payment|subscription|ticket|case)\b"
    r"|\bcan\s+(?:you|someone|support)\s+(?:see|check|tell\s+me)\s+(?:which|what|if|whether|why)\b"
    # ... or that staff change or look into them: "can you extend our trial", "bump our api rate limit", "look it up"
    rf"|{_STAFF_ASKED}(?:extend|bump|raise|increase|lift|boost|waive|move|check)\b[^.?!]{{0,40}}\b(?:trial|limit|quota|charge|"
    r"billing date|renewal|logs?)\b|\blook\s+(?:it|that|this)\s+up\b"
    # ... "our trial ends tomorrow, can u extend it": the thing named before the ask
    rf"|\b(?:trial|limit|quota)\b[^?!]{{0,80}}{_STAFF_ASKED}"
    r"(?:extend|bump|raise|increase|lift|boost|waive)\s+(?:it|that|this|ours?)\b"
    # ... "can u give us another week": more time granted
    rf"|{_STAFF_ASKED_ANY_YOU}(?:give|grant|allow)\s+(?:us|me|our team|them)\s+"
    r"(?:an?\s+|one\s+|\d+\s+|a\s+few\s+|a\s+couple\s+(?:of\s+)?)?"
    r"(?:another|extra|more|additional)\s+(?:\w+\s+)?(?:days?|weeks?|months?)\b"
    # ... or names the account by its e-mail address ("my account is dan@gmail.com", "the account of sarah@..."): a
    # message that hands over an address asks staff to look at or act on that account. Of every eval set's questions,
    # the 40 that give an address other than Nimbus's own are all for staff.
    r"|\b[\w.+-]+@(?!nimbusdrive\.com\b)[\w-]+(?:\.[\w-]+)+\b", re.I)
# A question about the service's state right now ("is nimbus down??", "was there an outage this morning?"): no
# article knows it, and the nearest one (sync troubleshooting) reads as if the customer's set-up were at fault.
_SERVICE = r"(?:nimbus(?:\s+drive)?|nimbusdrive(?:\.com)?|(?:the|your)\s+(?:site|website|service|servers?|app))"
_SERVICE_STATE = re.compile(
    rf"\b(?:is|are)\s+(?:{_SERVICE}|everything|it)\s+(?:(?:just|all|still)\s+)?down\b(?!\s+to\b)"
    rf"|\b{_SERVICE}\s+(?:is|was|seems|went)\s+(?:(?:still|totally|completely)\s+)?down\b(?!\s+to\b)"
    r"|\b(?:nimbus|your)\s+(?:\w+\s+)?outages?\b|\b(?:was|is) there an? outage\b"
    r"|\b(?:an?|your|nimbus'?s?) status page\b|\bservice status\b", re.I)
# A message that says it is about something else: never retrieved together with the one before it.
_NEW_TOPIC = re.compile(r"\b(?:different|separate|another|new|other) (?:thing|question|topic|issue|"
                        r"subject|matter|problem)\b|\bunrelated\b|\bon another note\b|"
                        r"\bchang(?:e|ing) (?:the )?subject\b", re.I)
# A message that reads as the continuation of the one before it: retrieved together with it (chatbot/turn.py).
_BACK_REFERENCE = re.compile(r"\b(?:it|its|it's|them|they|she|he|her|him|that|this|those|these)\b", re.I)
_FOLLOW_UP_OPENING = re.compile(r"^\s*(?:and|ok(?:ay)?|so|but|also|then|what about|how about|same|and if|if so|"
                                r"what if)\b", re.I)
# "Also, ..." adds a question of its own more often than it continues the one before: a long one leans back only by
# what it says ("also, can they edit it?"), not by its opening.
_ADDED_QUESTION = re.compile(r"^\s*also\b", re.I)
# Words that lean on the message before: a pronoun, or a closing "tho" ("im on the free plan tho").
_LEANING_WORD = re.compile(r"\b(?:it|that|this|those|these|they|them|there)\b|\b(?:tho|though)\W*$", re.I)
# Words that set a message against the one before wherever they stand ("im a teacher tho not a student, does it still
# apply to me"); not "even though", nor "wait" or "actually", which open new asks as often ("actually wait, could i
# just pause it").
_CONTRASTING = re.compile(r"(?<!even )\b(?:tho|though)\b|\bstill (?:apply|applies)\b", re.I)


def decline_reason(question: str) -> str:
    """CHANGES_INSTRUCTIONS or ACTS_ON_ACCOUNT for a message the assistant must decline, else ""."""
    question = question.replace("\u2019", "'")  # a phone's apostrophe
    if _INJECTION.search(question):
        return CHANGES_INSTRUCTIONS
    if _ACTS_ON_ACCOUNT.search(question):
        return ACTS_ON_ACCOUNT
    if _CUSTOMER_VOICE.search(question):
        return ""
    return CHANGES_INSTRUCTIONS if _STAFF_CLAIM.search(question) and _STAFF_ORDER.search(question) else ""


def own_records(question: str) -> str:
    """What in the question asks about the customer's own records ("invoice NMB-448210"), or ""."""
    found = _OWN_RECORDS.search(question)
    return found.group(0) if found else ""


def service_state(question: str) -> str:
    """What in the question asks about the service's state right now ("is nimbus down"), or ""."""
    found = _SERVICE_STATE.search(question)
    return found.group(0) if found else ""


def needs_sum(question: str) -> bool:
    """True when answering means arithmetic on the article's figures (seats times price, a year against months),
    which the 135M model gets wrong: the reply gives the figures instead."""
    if not _PRICE.search(question) or not _ASKS_AMOUNT.search(question):
        return False
    return bool(asks_a_count(question) or _COMPARE.search(question)
                or _ADDED.search(question) or _SAVING.search(question) or asks_for_add_on(question)
                or asks_more_by_the_month(question))


def reads_as_follow_up(message: str) -> bool:
    """True for a short message that leans on the one before it ("and on Personal?", "how long does that take"); one
    that opens with "also" only by what it says ("also can they edit it?", not "also any nonprofit discount?")."""
    if len(message.split()) > 12:
        return False
    return bool(_LEANING_WORD.search(message)) or (bool(_FOLLOW_UP_OPENING.match(message))
                                                   and not _ADDED_QUESTION.match(message))


def changes_subject(message: str) -> bool:
    """Whether the message says it is about something else than the one before it ("totally different thing, ...")."""
    return bool(_NEW_TOPIC.search(message))


def may_lean_back(message: str) -> bool:
    """True unless the message reads whole without the one before it: a follow-up, a message of a few words, or one
    whose opening names someone or something already said ("can they edit it too?", "its a 2017 macbook air ...")."""
    words = message.split()
    opens_as_follow_up = bool(_FOLLOW_UP_OPENING.match(message)) and not _ADDED_QUESTION.match(message)
    return (len(words) <= 8 or reads_as_follow_up(message) or opens_as_follow_up
            or bool(_BACK_REFERENCE.search(" ".join(words[:6]))) or bool(_CONTRASTING.search(message)))


# A word at most this many articles and approved answers use is rare: it finds its article (article_by_rare_words).
RARE_DOCUMENTS = 2


@dataclass(frozen=True)
class ClosestLine:
    """The help-centre sentence closest in meaning to a question: its article and its cosine to the question."""

    article: ArticleRecord
    closeness: float


class HelpCentreWords:
    """The help centre's vocabulary (articles and approved answers), read again only after the cache changed."""

    def __init__(self, cache: AnswerCache, is_word: Callable[[str], bool]) -> None:
        self.cache, self.is_word = cache, is_word
        self._change = -1
        self._vocabulary = Vocabulary(0, {})
        self._articles: list[tuple[ArticleRecord, set[str]]] = []  # each article with its stems, as of `_change`
        self._sentences: list[tuple[ArticleRecord, str]] = []  # each sentence of every article's body, with it

    def warm(self) -> None:
        """Embed every article's sentences ahead of the first question `article_by_sentence` reads them for
        (seconds for the shipped help centre with all-mpnet-base-v2), not while a customer waits."""
        self.article_by_sentence("warm-up")

    def article_by_sentence(self, question: str, saying: tuple[str, ...] = ()) -> ClosestLine | None:
        """The article that holds the sentence closest in meaning to the question, with that cosine: a long article's
        vector stands for its main topics, and a question about one line of it ("can i put face id on the app?" and
        the mobile app's article) is found by the line. Only sentences that say one of the phrases `saying` (an
        action, chatbot/actions.py) where it is given. None when no article's sentence qualifies."""
        self.vocabulary()  # refreshes the snapshot after a change
        held = self._sentences  # one snapshot: a refresh replaces the list whole
        if saying:
            held = [(article, sentence) for article, sentence in held if said(padded(sentence), saying)]
        if not held:
            return None
        closeness = self.cache.similarities(question, [sentence for _, sentence in held])
        best = max(range(len(held)), key=closeness.__getitem__)
        return ClosestLine(held[best][0], closeness[best])

    def article_by_rare_words(self, question: str) -> ArticleRecord | None:
        """The article that uses the most of the question's rare words (at most RARE_DOCUMENTS articles or approved
        answers use them), for a question whose meaning the articles' vectors missed: an error code ("api keeps
        returning 429"), a system's name ("fedora"), a language. None when no article or several tie."""
        vocabulary = self.vocabulary()
        rare = {term for term in vocabulary.terms(question) if vocabulary.rare(term, RARE_DOCUMENTS)}
        if not rare:
            return None
        articles = self._articles  # one snapshot: a refresh replaces the list whole
        held = [len(rare & article_stems) for _, article_stems in articles]
        most = max(held, default=0)
        return articles[held.index(most)][0] if most and held.count(most) == 1 else None

    def vocabulary(self) -> Vocabulary:
        change = self.cache.change_number()
        if change != self._change:
            articles = self.cache.list_articles()
            approved = self.cache.list_entries(review="approved", limit=100_000).entries
            texts = [f"{a.title}\n{a.body}" for a in articles] + [f"{e.question}\n{e.answer}" for e in approved]
            self._articles = [(a, stems(f"{a.title}\n{a.body}")) for a in articles]
            self._sentences = [(a, sentence) for a in articles for sentence in text_sentences(a.body)]
            self._vocabulary, self._change = Vocabulary.of(texts, self.is_word), change
        return self._vocabulary


def without_hand_offs(messages: list[Message], handoff_message: str) -> list[Message]:
    """The conversation without its handed-off exchanges (a message nothing covered and the hand-off message
    after it). They tell the model nothing; kept, a customer's "hi" would make the question after it a follow-up,
    decoded whatever covers it, and cost it the exact hits of the same question asked first."""
    kept: list[Message] = []
    for message in messages:
        if message.role == "assistant" and message.content.strip() == handoff_message.strip():
            if kept and kept[-1].role == "user":
                kept.pop()
            continue
        kept.append(message)
    return kept


def check_question(question: object, max_chars: int) -> str:
    """The question as the model sees it, or InputError with a message fit for the customer."""
    if not isinstance(question, str):
        raise InputError("The message must be text.")
    # Runs of spaces are collapsed before the model sees the text, so that a repeat typed with
    # other spacing is the identical prompt (an exact hit) and still the model's own answer.
    question = "\n".join(" ".join(line.split()) for line in clean_text(question).strip().splitlines())
    if not question:
        raise InputError("Please type a question.")
    if len(question) > max_chars:
        raise InputError(
            f"Your message has {len(question):,} characters; the limit is {max_chars:,}. Please shorten it."
        )
    return question
