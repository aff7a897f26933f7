"""Text and escaped HTML for replies: the stats line, copied-span highlighting, the list of references.

Everything a user, the model or the cache wrote goes through `html.escape` before it becomes HTML here.
"""

import html
import re
from collections.abc import Sequence

from chatbot import ArticleRecord, CachedAnswer, ReferenceUse, ReplyStats, Span

from .widgets import shorten

SOURCE_CLASSES = {"cache": "copied-cache", "prompt": "copied-prompt", "reply": "copied-reply"}
SOURCE_TITLES = {
    "prompt": "copied from the prompt (help article or conversation)",
    "reply": "copied from earlier in this reply",
}
SNIPPET_CHARS = 400


_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.DOTALL)


def escape_markup(text: str) -> str:
    """Text for a Markdown bubble in which HTML shows as typed instead of being rendered or stripped.

    Code spans and fences are left alone: Markdown already shows their content literally.
    """
    parts = _CODE.split(text)
    return "".join(part if i % 2 else html.escape(part, quote=False) for i, part in enumerate(parts))


def speedup_label(stats: ReplyStats) -> str:
    """'1.8x (exact repeat)' or '1.8x (estimated)': the method in a word, the full method elsewhere."""
    kind = "exact repeat" if stats.exact_hit else "estimated"
    return f"{stats.speedup:.1f}x ({kind})"


def stats_line(stats: ReplyStats) -> str:
    """One compact line of numbers for under a reply, e.g. '32 tokens · 1.41 s · 22.7 tok/s · ...'."""
    if stats.handed_off:  # its method says why nothing was decoded
        return f"{stats.speedup_method} · {stats.seconds:.2f} s"
    passes = stats.forward_passes
    parts = [
        f"{stats.tokens} tokens",
        f"{stats.seconds:.2f} s",
        f"{stats.tokens_per_second:.1f} tok/s",
        f"speedup {speedup_label(stats)}",
        f"{stats.copied_share:.0%} copied",
        f"{passes} forward pass{'' if passes == 1 else 'es'}",
    ]
    if stats.prompt_reused:  # its prefill computed only the rest
        parts.append(f"{stats.prompt_reused} of {stats.prompt_tokens} prompt tokens reused")
    if stats.shared_with > 0:  # its seconds include the shared forwards' extra rows
        parts.append(f"shared forwards with {stats.shared_with:.1f} others on average")
    parts += [grounding_label(use, stats.tokens) for use in stats.grounding]
    ending = ending_label(stats)
    return " · ".join([*parts, ending] if ending else parts)


def ending_label(stats: ReplyStats) -> str:
    """How the reply ended, when that is news: cut at its last supported sentence, by the token limit, or where it
    began repeating itself."""
    if stats.outcome in ("cut", "staff text"):
        return f"shown up to its last supported sentence ({stats.outcome_reason})"
    if stats.hit_limit:
        return f"⚠ stopped at the {stats.tokens}-token limit (the answer may be cut off)"
    if stats.stop_reason == "repetition":
        return "ended where it began repeating itself"
    return ""


def grounding_label(use: ReferenceUse, reply_tokens: int) -> str:
    """Which approved answer was in the prompt, and how much of the reply was copied from it."""
    share = use.copied / reply_tokens if reply_tokens else 0.0
    return f"guided by approved answer #{use.id} ({share:.0%} copied from it)"


def reply_markdown(text: str, stats: ReplyStats, notice: str = "") -> str:
    """The assistant bubble: the reply, then the stats line (and a notice) in small print."""
    method = html.escape(f"How the speedup was measured: {stats.speedup_method}", quote=True)
    footer = f'<sub title="{method}">{html.escape(stats_line(stats))}</sub>'
    if notice:
        footer += f"\n\n<sub>⚠ {html.escape(notice)}</sub>"
    return f"{escape_markup(text)}\n\n{footer}"


def highlighted_html(text: str, spans: Sequence[Span]) -> str:
    """The reply with copied characters in <mark>, coloured by where they were copied from."""
    pieces, position = [], 0
    for span in sorted(spans, key=lambda s: s.start):
        start, end = max(span.start, position), min(span.end, len(text))
        if end <= start:
            continue
        pieces.append(html.escape(text[position:start]))
        kind = span.source.split(":", 1)[0]
        title = html.escape(_source_title(span.source), quote=True)
        css = SOURCE_CLASSES.get(kind, "copied-prompt")
        pieces.append(f'<mark class="{css}" title="{title}">{html.escape(text[start:end])}</mark>')
        position = end
    pieces.append(html.escape(text[position:]))
    return f'<div class="reply-text">{"".join(pieces)}</div>'


def _source_title(source: str) -> str:
    kind, _, entry_id = source.partition(":")
    if kind == "cache":
        return f"copied from cached answer #{entry_id}"
    return SOURCE_TITLES.get(kind, f"copied from {source}")


def references_html(
    stats: ReplyStats, entries: dict[int, CachedAnswer | None], article: ArticleRecord | None
) -> str:
    """The cached answers and the help article that served as references, escaped, with how much was copied."""
    grounded = {use.id for use in stats.grounding}
    items = [_reference_item(ref, entries.get(ref.id), ref.id in grounded) for ref in stats.references]
    if stats.article is not None:
        title = article.title if article is not None else "(article since deleted)"
        items.append(
            f"<li>Help article <b>{html.escape(stats.article.id)}</b>: {html.escape(title)} "
            f"(similarity {stats.article.similarity:.2f})</li>"
        )
    if not items:
        return "<p>No cached answer or help article was similar enough to serve as a reference.</p>"
    return f"<ul class='references'>{''.join(items)}</ul>"


def _reference_item(ref: ReferenceUse, entry: CachedAnswer | None, in_prompt: bool) -> str:
    kind = "Approved answer, in the prompt," if in_prompt else "Cached answer"
    head = f"{kind} <b>#{ref.id}</b> (similarity {ref.similarity:.2f}, {ref.copied} tokens copied)"
    if entry is None:
        return f"<li>{head}: (since deleted)</li>"
    return (
        f"<li>{head}<br><i>Q:</i> {html.escape(shorten(entry.question, SNIPPET_CHARS))}"
        f"<br><i>A:</i> {html.escape(shorten(entry.answer, SNIPPET_CHARS))}</li>"
    )


def method_html(stats: ReplyStats) -> str:
    """How the speedup was measured, in full."""
    method = html.escape(stats.speedup_method)
    return f"<p class='speedup-method'><b>How the speedup was measured:</b> {method}</p>"


def details_html(text: str, spans: Sequence[Span], stats: ReplyStats, references: str) -> str:
    """The panel under the chat for one reply: highlighted copies, the speedup method, the references."""
    legend = (
        "<p class='legend'>Copied from: <mark class='copied-cache'>a cached answer</mark> "
        "<mark class='copied-prompt'>the prompt</mark> <mark class='copied-reply'>earlier in the reply</mark>; "
        "everything copied was checked against the model's own choices.</p>"
    )
    if stats.handed_off:  # nothing was decoded, copied or looked up beyond the question
        why = html.escape(stats.outcome_reason or "no answer our support staff approved and no help article covers "
                          "this question")
        return (f"{highlighted_html(text, spans)}<p>Not decoded ({html.escape(stats.outcome)}): {why}. It is listed "
                "on the admin Dashboard among the questions to write answers for.</p>")
    return f"{legend}{highlighted_html(text, spans)}{method_html(stats)}<h4>References</h4>{references}"

