"""Which kind of device a text is about: a phone (or tablet) or a computer.

A question about one that meets a source about only the other is not answered by it, however many words they share:
"lost my phone, how do i stop it syncing my files?" beside the selective-sync steps for a laptop (system tray, menu
bar) would get those steps, which do nothing for a phone (chatbot/relevance.py `check_source`).
"""

from .terms import words

# The words for each kind, as chatbot/terms.py `words` reads them: its synonyms have made "laptop", "computer", "pc"
# and "mac" "desktop", and "cell" "phone".
DEVICE_WORDS = {
    "phone": frozenset({"phone", "phones", "iphone", "iphones", "smartphone", "android", "ios", "ipad", "ipads",
                        "tablet", "tablets", "mobile"}),
    "computer": frozenset({"desktop", "desktops", "macbook", "imac", "windows", "macos", "linux", "tray", "finder",
                           "explorer"}),
}


def devices_named(text: str) -> set[str]:
    """The kinds of device `text` names."""
    said = set(words(text))
    return {kind for kind, names in DEVICE_WORDS.items() if said & names}


def other_device(question: str, source: str) -> tuple[str, str] | None:
    """(the question's kind of device, the source's) where each names one kind only and they differ, else None."""
    asked, given = devices_named(question), devices_named(source)
    if len(asked) == 1 and len(given) == 1 and asked != given:
        return next(iter(asked)), next(iter(given))
    return None
