"""Text and escaped HTML for replies: the stats line, copied-span highlighting, the list of references.

Everything a user, the model or the cache wrote goes through `html.escape` before it becomes HTML here.
"""

import html
import re
from collections.abc import Sequence

from chatbot import ArticleRecord, CachedAnswer, Span

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


def speedup_label(stats: dict) -> str:
    """'1.8x (exact repeat)' or '1.8x (estimated)': the method in a word, the full method elsewhere."""
    speedup = stats.get("speedup")
    if not isinstance(speedup, int | float):
        return "n/a"
    kind = "exact repeat" if stats.get("exact_hit") else "estimated"
    return f"{speedup:.1f}x ({kind})"


def stats_line(stats: dict) -> str:
    """One compact line of numbers for under a reply, e.g. '32 tokens · 1.41 s · 22.7 tok/s · ...'."""
    passes = stats.get("forward_passes", 0)
    parts = [
        f"{stats.get('tokens', 0)} tokens",
        f"{stats.get('seconds', 0.0):.2f} s",
        f"{stats.get('tokens_per_second', 0.0):.1f} tok/s",
        f"speedup {speedup_label(stats)}",
        f"{stats.get('copied_share', 0.0):.0%} copied",
        f"{passes} forward pass{'' if passes == 1 else 'es'}",
    ]
    return " · ".join(parts)


def reply_markdown(text: str, stats: dict, notice: str = "") -> str:
    """The assistant bubble: the reply, then the stats line (and a notice) in small print."""
    method = html.escape(f"How the speedup was measured: {stats.get('speedup_method', 'not measured')}", quote=True)
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


def references_html(stats: dict, entries: dict[int, CachedAnswer | None], article: ArticleRecord | None) -> str:
    """The cached answers and the help article that served as references, escaped, with how much was copied."""
    items = [_reference_item(ref, entries.get(ref.get("id"))) for ref in stats.get("references", [])]
    article_stats = stats.get("article")
    if article_stats:
        title = article.title if article is not None else "(article since deleted)"
        items.append(
            f"<li>Help article <b>{html.escape(str(article_stats.get('id')))}</b>: {html.escape(title)} "
            f"(similarity {article_stats.get('similarity', 0):.2f})</li>"
        )
    if not items:
        return "<p>No cached answer or help article was similar enough to serve as a reference.</p>"
    return f"<ul class='references'>{''.join(items)}</ul>"


def _reference_item(ref: dict, entry: CachedAnswer | None) -> str:
    head = (
        f"Cached answer <b>#{html.escape(str(ref.get('id')))}</b> "
        f"(similarity {ref.get('similarity', 0):.2f}, {ref.get('copied', 0)} tokens copied)"
    )
    if entry is None:
        return f"<li>{head}: (since deleted)</li>"
    return (
        f"<li>{head}<br><i>Q:</i> {html.escape(shorten(entry.question, SNIPPET_CHARS))}"
        f"<br><i>A:</i> {html.escape(shorten(entry.answer, SNIPPET_CHARS))}</li>"
    )


def method_html(stats: dict) -> str:
    """How the speedup was measured, in full."""
    method = html.escape(str(stats.get("speedup_method", "not measured")))
    return f"<p class='speedup-method'><b>How the speedup was measured:</b> {method}</p>"


def details_html(text: str, spans: Sequence[Span], stats: dict, references: str) -> str:
    """The panel under the chat for one reply: highlighted copies, the speedup method, the references."""
    legend = (
        "<p class='legend'>Copied from: <mark class='copied-cache'>a cached answer</mark> "
        "<mark class='copied-prompt'>the prompt</mark> <mark class='copied-reply'>earlier in the reply</mark>; "
        "everything copied was checked against the model's own choices.</p>"
    )
    return f"{legend}{highlighted_html(text, spans)}{method_html(stats)}<h4>References</h4>{references}"

