"""What the customer is shown for one turn: the model's reply, its prefix up to the last supported sentence, staff's
own text shown as such, the hand-off message or the decline. Never an edited reply: staff's text only follows."""

from dataclasses import dataclass

from cache.records import ANSWERED, CUT, DECLINED, HANDED_OFF, STAFF_TEXT

from .support import Passage, ReplyCheck

# Why a question gets the hand-off when no check names a source it failed.
NOTHING_COVERS = "no approved answer or help article covers this question"
# What a message that tries to change the assistant's instructions gets, not decoded.
DECLINE_MESSAGE = ("I can't change how I work or share my instructions. I can help with questions about your Nimbus "
                   "Drive account, files, sharing and billing.")


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
    if not model_text and check.failed is not None and check.failed.says_yes:
        # A reply that opens with a yes no source gives was asked about what the help centre does not describe
        # ("an app for Apple Watch?"); the closest passage is about something else. In bench.answers' four seen
        # sets, 9 such replies were followed by a passage: 6 to questions nothing covers, 2 it answered.
        passage, reason = None, f"{reason}; a yes no source gives"
    outcome = CUT if model_text else STAFF_TEXT if passage else HANDED_OFF
    return Shown(model_text, offer(passage, handoff_message, cut=bool(model_text)), outcome, reason)


def shown_undecoded(outcome: str, reason: str, passage: Passage | None, handoff_message: str) -> Shown:
    """What a turn that is not decoded shows: staff's text, the decline or the hand-off message."""
    if outcome == STAFF_TEXT:
        return Shown("", offer(passage, handoff_message, cut=False), outcome, reason)
    return Shown("", DECLINE_MESSAGE if outcome == DECLINED else handoff_message, outcome, reason)


def offer(passage: Passage | None, handoff_message: str, cut: bool) -> str:
    """Staff's text shown as such: an approved answer or an article's passage, quoted under its title; else the
    hand-off message."""
    if passage is None:
        return handoff_message
    lead = "I can't confirm more than that. " if cut else ""
    quoted = "\n".join(f"> {line}" for line in passage.text.splitlines())
    if passage.source.startswith("answer:"):
        return f"{lead}Our support team's answer to \u201c{passage.title}\u201d:\n\n{quoted}"
    return f"{lead}From our help article \u201c{passage.title}\u201d:\n\n{quoted}"
