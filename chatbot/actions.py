"""The actions a customer's text asks for, and their opposites: the phrases that say each side (turn on / turn
off, add / remove, create / close, ...) and where a text says them, read by the source checks (chatbot/relevance.py)
and the reply checks."""

import functools
import re

from .terms import stem

# A switch's two ways as a customer asks for them ("turn off", not "my laptop was switched off"); the direction
# test also reads looser words for each ("set up", "get rid of"), and a source switches with any of those or these.
SWITCHES = (("turn on", "switch on", "enable"),
            ("turn off", "switch off", "turn it off", "switch it off", "disable"))
SWITCHED = ("activate", "deactivate", "resume", "connect", "disconnect")  # not "pause": "uploads pause when full"
DEVICE_SWITCH = re.compile(r" (?:turn|switch)\w* (?:on |off )?(?:my |the |our |it )?"
                           r"(?:laptop|phone|computer|desktop|pc|mac|ipad|tablet|wifi|router|device)s? ")
# "Stop uploads from failing" wants them to go on: what follows says a fault, not the process, is to stop.
_KEPT_GOING = (r"(?!(?:from )?(?:fail|failing|getting stuck|pausing|stopping|crashing|breaking|erroring|freezing|"
               r"hanging|stalling|timing out)\b)")
# "close to signing", "close by": nearness, not closing something; "shut that key off": switching it off.
_NOT_FOLLOWED_BY = {"stop": _KEPT_GOING, "close": r"(?!(?:to|by|enough) )", "shut": r"(?!(?:[a-z0-9'-]+ ){0,3}off )"}
# What a customer stops where the help centre switches it on ("stop camera uploads" is not answered by the turn-on
# steps); "stop" alone is looser ("stop the link working", "stop paying for her seat").
_STOPPED_PROCESS = tuple(f"stop {the}{what}" for the in ("", "the ", "my ", "all ")
                         for what in ("uploading", "syncing", "backing up", "uploads", "camera uploads",
                                      "photo uploads", "auto uploads", "auto upload", "sync", "backups", "backup"))
# Opposite actions, each side a set of phrases. A question doing one side is not answered by a source whose
# question does the other, nor by an article that never says its side.
OPPOSITES = (
    ((*SWITCHES[0], "activate", "set up", "setup"),
     (*SWITCHES[1], "deactivate", "don't want", "no longer want", "get rid of", *_STOPPED_PROCESS,
      "from uploading", "from syncing", "from backing up")),
    (("add", "invite"), ("remove", "delete", "kick", "take off")),  # "take her off our team", "take it off"
    (("start", "begin", "resume"), ("stop", "pause", "end")),
    (("show", "unhide"), ("hide",)),
    (("cancel", "downgrade", "down to"), ("restore", "reactivate", "renew", "upgrade")),
    (("share",), ("unshare", "stop sharing", "remove someone", "remove someone's access", "remove access",
                  "remove their access", "remove his access", "remove her access")),
    (("lock",), ("unlock",)),
    (("require", "enforce", "force"),
     ("un-require", "unrequire", "stop requiring", "stop forcing", "stop enforcing", "no longer require",
      "remove the requirement")),
    (("restore", "recover", "undelete", "get back", "bring back", "get it back", "get them back", "get that back",
      "get those back"),
     ("delete permanently", "permanently delete", "gone for good", "delete forever", "for good", "for real",
      "empty trash", "empty the trash", "gone gone", "erase", "skip the trash", "bypass the trash")),
    (("update", "replace", "swap"), ("remove", "delete", "get rid of")),
    (("block",), ("unblock",)),
    (("connect", "integrate"), ("disconnect",)),  # not "unlink": "connect my new laptop" beside the device limit
    (("delete", "remove"), ("undo", "undelete", "cancel the deletion", "reverse")),
    (("install",), ("uninstall",)),
    (("archive",), ("unarchive",)),
    (("create",), ("close", "shut")),  # "shut that upload page": a file request is closed, not created
    # Not an action but its premise: a customer who still knows the password wants to change it, not the
    # forgotten-password steps.
    (("forgot", "forget", "forgotten", "can't remember", "cant remember", "don't remember", "dont remember"),
     ("still know", "know my password", "know my current password", "know my old password", "know the password")),
)

# The one-word actions above, as stems: a question's action a source's sentence says and another source lacks.
ACTION_TERMS = frozenset(stem(phrase) for pair in OPPOSITES for side in pair for phrase in side if " " not in phrase)

# The particles of phrasal verbs above that may stand apart from their verb ("turn 2FA off").
PARTICLES = ("on", "off")


def said(text: str, phrases: tuple[str, ...]) -> str:
    """The phrase of `phrases` said last in `text` (padded), or ""."""
    return said_at(text, phrases)[0]


def said_at(text: str, phrases: tuple[str, ...], base_only: bool = False) -> tuple[str, int]:
    """The phrase of `phrases` said last in `text` (padded) and where, or ("", -1). A verb and its particle may stand
    apart ("switch that requirement back off" says "switch off")."""
    found, last = "", -1
    for phrase in phrases:
        for match in phrase_regex(phrase, base_only).finditer(text):
            if match.start() > last:
                found, last = phrase, match.start()
    return found, last


@functools.cache  # compiled once: re's lookup per call was a third of the direction checks' time
def phrase_regex(phrase: str, base_only: bool = False) -> re.Pattern:
    """Where a padded text says `phrase`: its verb in any form (or the base form alone) with its particle a few
    words on ("turn 2fa off"), or the phrase as written."""
    verb, _, particle = phrase.partition(" ")
    if particle in PARTICLES:
        ending = "" if base_only else "(?:s|ed|ing)?"
        return re.compile(rf" {re.escape(verb)}{ending} (?:[a-z0-9'-]+ ){{0,3}}{particle} ")
    return re.compile(f"(?= {re.escape(phrase)} {_NOT_FOLLOWED_BY.get(verb, '')})")


def padded(text: str) -> str:
    """`text` lowered, its words between single spaces and a space at each end, for the phrase patterns."""
    lowered = re.sub(r"\bun-(?=[a-z])", "un", text.lower().replace("’", "'"))  # "un-require" is "unrequire"
    return (" " + re.sub(r"[^a-z0-9.']+", " ", lowered) + " ").replace(". ", " ")
