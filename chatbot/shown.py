"""What the customer is shown for one turn: the model's reply, its prefix up to the last supported sentence, staff's
own text shown as such, the hand-off message or the decline. Never an edited reply: staff's text only follows."""

import re
from dataclasses import dataclass, replace

from cache.records import ANSWERED, CUT, DECLINED, HANDED_OFF, STAFF_TEXT

from .passages import Passage
from .prompt import Message
from .questions import ACTS_ON_ACCOUNT, CHANGES_INSTRUCTIONS
from .support import ReplyCheck

# Why a question gets the hand-off when no check names a source it failed.
NOTHING_COVERS = "no approved answer or help article covers this question"
# What a declined message gets, not decoded, by the reason chatbot/questions.py gave.
DECLINE_MESSAGES = {
    CHANGES_INSTRUCTIONS: ("I can't change how I work or share my instructions. I can help with questions about your "
                           "Nimbus Drive account, files, sharing and billing."),
    ACTS_ON_ACCOUNT: ("I can't sign in to any account, read out or send passwords, codes or login details, or change "
                      "another person's account. Please don't share your password or codes with anyone, here "
                      "included. If you can't get into an account, please contact our support team."),
}

# Shown under a reply that no staff-approved answer backs. The 135M model answers a question nothing covers as
# readily as one it knows ("Is my data encrypted?": "No, your data is not encrypted"), and told in the prompt to
# say it does not know, it did not (it looped instead): so the customer is told, outside the reply. A follow-up
# ("make that shorter") gets it too: its reply restates the earlier one in words no one approved.
UNCHECKED_NOTICE = ("This reply is not backed by an answer our support staff approved: the assistant wrote it on its "
                    "own, and it may be wrong. Please check with our support team before relying on it.")

# Under a reply that an approved answer grounded but that copied less than this share of its tokens from it: the
# model went its own way ("how do i add a team member": 32% copied, then steps that loop on "Add"). The
# approved answers the service workload grounds are copied 62-87% when the reply follows them.
FOLLOWED_ENOUGH = 0.5
DEPARTED_NOTICE = ("Only {share:.0%} of this reply follows the answer our support staff approved for this question: "
                   "the rest the assistant wrote on its own, and it may be wrong.")


# The heads of staff's text shown as such (`offer`), which `without_frames` takes off again.
CUT_LEAD = "I can't confirm more than that. "
WORKED_FROM, QUOTED_FROM, ANSWER_OF = "Worked out from our", "From our", "Our support team's answer to"


@dataclass(frozen=True)
class Shown:
    """The two parts of what the customer reads, which of OUTCOMES that is, and the check that decided it."""

    model_text: str  # the rule's greedy reply, or a prefix of it
    staff_text: str  # staff's own words after it (or instead of it), labelled as theirs
    outcome: str
    reason: str = ""

    @property
    def text(self) -> str:
        return "\n\n".join(part for part in (self.model_text, self.staff_text) if part)


def shown_after_check(reply: str, check: ReplyCheck, passage: Passage | None, handoff_message: str) -> Shown:
    """A decoded reply as its sentence check lets it be shown: whole, or cut at the last supported sentence and
    followed by `passage` (or the hand-off message when there is none)."""
    if not check.cut:
        return Shown(reply, "", ANSWERED)
    model_text = reply[: check.shown_end].rstrip()
    reason = f"sentence {len(check.checked)}: {check.failed.reason}" if check.failed else ""
    if not model_text and check.failed is not None and check.failed.says_yes and not (passage and passage.close):
        # A reply that opens with a yes no source gives was asked about what the help centre does not describe
        # ("an app for Apple Watch?"); the closest passage is about something else, unless one of its sentences is
        # about what was asked ("can i lock the app with face id?" and the line that says how).
        passage, reason = None, f"{reason}; a yes no source gives"
    if model_text and passage and _begins(_flat(passage.text), _flat(model_text)):
        model_text = ""  # the kept part is the passage's own beginning: the passage alone, said once
    outcome = CUT if model_text else STAFF_TEXT if passage else HANDED_OFF
    return Shown(model_text, offer(passage, handoff_message, cut=bool(model_text)), outcome, reason)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _begins(text: str, beginning: str) -> bool:
    """Whether `text` begins with `beginning`, ending at a whole word."""
    return text.startswith(beginning) and text[len(beginning) : len(beginning) + 1] in ("", " ")


def shown_undecoded(outcome: str, reason: str, passage: Passage | None, handoff_message: str) -> Shown:
    """What a turn that is not decoded shows: staff's text, the decline or the hand-off message."""
    if outcome == STAFF_TEXT:
        return Shown("", offer(passage, handoff_message, cut=False), outcome, reason)
    return Shown("", DECLINE_MESSAGES[reason] if outcome == DECLINED else handoff_message, outcome, reason)


def offer(passage: Passage | None, handoff_message: str, cut: bool) -> str:
    """Staff's text shown as such: an approved answer or an article's passage, quoted under its title; else the
    hand-off message."""
    if passage is None:
        return handoff_message
    lead = CUT_LEAD if cut else ""
    quoted = "\n".join(f"> {line}" for line in passage.text.splitlines())
    title, also = _flat(passage.title), _flat(passage.also)  # a question asked in two lines
    articles = (f"help articles \u201c{title}\u201d and \u201c{also}\u201d" if also
                else f"help article \u201c{title}\u201d")
    if passage.worked:
        return f"{lead}{WORKED_FROM} {articles}: {passage.worked}\n\n{quoted}"
    if passage.from_answer:
        return f"{lead}{ANSWER_OF} \u201c{title}\u201d:\n\n{quoted}"
    return f"{lead}{QUOTED_FROM} {articles}:\n\n{quoted}"


# The frame `offer` puts around staff's text: its lead line and the quote marks.
_TITLES = r"help articles? \u201c[^\n]*?\u201d(?: and \u201c[^\n]*?\u201d)?"
_OFFER_LEAD = re.compile(
    rf"^(?:{re.escape(CUT_LEAD)})?(?:{WORKED_FROM} {_TITLES}: |(?:{QUOTED_FROM} {_TITLES}"
    rf"|{re.escape(ANSWER_OF)} \u201c[^\n]*\u201d):$)", re.MULTILINE)
_QUOTE = re.compile(r"^> ?", re.MULTILINE)


def without_frames(messages: list[Message]) -> list[Message]:
    """The conversation with staff's text in the service's earlier replies as plain text: without the lead line
    and the quote marks `offer` framed it in. Kept in a prompt, the frame is copied: the model wrote "I can't confirm
    more than that. From our help article ...:" itself, with nothing after it."""
    return [replace(m, content=_unframed(m.content)) if m.role == "assistant" else m for m in messages]


def _unframed(text: str) -> str:
    """`text` without its frame: the lead line, and the quote marks of the lines after it (the model's own lines
    before it stay as they were)."""
    lead = _OFFER_LEAD.search(text)
    if lead is None:
        return text
    staff_text = _QUOTE.sub("", text[lead.end():])
    return re.sub(r"\n{3,}", "\n\n", f"{text[:lead.start()]}{staff_text}").strip()
