"""The stats line, the highlighting and the reference list: numbers shown right, all foreign text escaped."""

from dataclasses import replace
from datetime import UTC, datetime

from chatbot import ArticleRecord, ArticleUse, CachedAnswer, ReferenceUse, ReplyStats, Span
from webui import format as fmt

EVIL = '<script>alert(1)</script><img src=x onerror=alert(2)>"\''
STATS = ReplyStats(
    tokens=32, forward_passes=18, copied_tokens=14, seconds=1.4123, tokens_per_second=22.66,
    greedy_seconds_estimate=2.5, speedup=1.77, speedup_method="estimate: prefill + 31 steps", exact_hit=False,
    copied_share=0.438, tokens_per_forward_pass=1.78, references=(ReferenceUse(7, 0.812, 14),),
    article=ArticleUse("reset-password", 0.6),
)


def entry(entry_id: int, question: str, answer: str) -> CachedAnswer:
    now = datetime.now(UTC)
    return CachedAnswer(
        id=entry_id, question=question, normalized_question=question.lower(), context="", context_key="",
        answer=answer, answer_ids=[1], model_id="m", prompt_hash="", article_ids=[], stats={},
        review="candidate", speedup=None,
        created_at=now, updated_at=now, last_used_at=now, hits=0, uses=0,
    )


def test_stats_line_has_every_number():
    line = fmt.stats_line(STATS)
    assert line == (
        "32 tokens · 1.41 s · 22.7 tok/s · speedup 1.8x (estimated) · 44% copied · 18 forward passes"
    )


def test_exact_hit_says_how_the_speedup_was_measured():
    line = fmt.stats_line(replace(STATS, exact_hit=True, forward_passes=0, speedup=85.0, copied_share=1.0))
    assert "speedup 85.0x (exact repeat)" in line and "100% copied" in line and "0 forward passes" in line


def test_a_handed_off_reply_says_it_was_not_decoded_instead_of_a_speedup():
    line = fmt.stats_line(ReplyStats.for_hand_off(0.0412))
    assert line == "not decoded: no approved answer or help article covers this question · 0.04 s"
    panel = fmt.details_html("Please contact <b>us</b>.", [], ReplyStats.for_hand_off(0.04), "")
    assert "Not decoded" in panel and "Copied from" not in panel and "&lt;b&gt;" in panel


def test_a_cut_reply_says_where_and_why():
    line = fmt.stats_line(replace(STATS, outcome="cut", outcome_reason="sentence 2: '99 GB' is in no source"))
    assert line.endswith("shown up to its last supported sentence (sentence 2: '99 GB' is in no source)")
    declined = ReplyStats.for_hand_off(0.01, "declined", "tries to change the assistant's instructions")
    assert "Not decoded (declined): tries to change" in fmt.details_html("No.", [], declined, "")


def test_reply_markdown_puts_the_method_in_a_tooltip_escaped():
    bubble = fmt.reply_markdown("Hello", replace(STATS, speedup_method=EVIL), notice="old <b>turns</b> dropped")
    assert bubble.startswith('Hello\n\n<sub title="How the speedup was measured: &lt;script&gt;')
    assert "<script>" not in bubble and "<img" not in bubble and "<b>" not in bubble
    assert "&quot;&#x27;" in bubble  # quotes cannot end the title attribute


def test_highlighting_marks_the_spans_and_escapes_the_rest():
    text = "abc <b>def</b> ghi"
    out = fmt.highlighted_html(text, [Span(4, 14, "cache:3"), Span(15, 18, "reply")])
    assert '<mark class="copied-cache" title="copied from cached answer #3">&lt;b&gt;def&lt;/b&gt;</mark>' in out
    assert '<mark class="copied-reply" title="copied from earlier in this reply">ghi</mark>' in out
    assert out.startswith('<div class="reply-text">abc ')


def test_highlighting_survives_overlapping_and_out_of_range_spans():
    out = fmt.highlighted_html("abcdef", [Span(0, 4, "prompt"), Span(2, 5, "prompt"), Span(5, 99, "reply")])
    assert out.count("<mark") == 3 and "abcd" in out and ">e</mark>" in out and ">f</mark>" in out


def test_references_escape_cached_text_and_note_deleted_ones():
    stats = replace(STATS, references=(ReferenceUse(7, 0.8, 3), ReferenceUse(9, 0.6, 0)))
    article = ArticleRecord("reset-password", EVIL, "body", datetime.now(UTC), datetime.now(UTC))
    out = fmt.references_html(stats, {7: entry(7, EVIL, EVIL), 9: None}, article)
    assert "<script>" not in out and "<img" not in out
    assert out.count("&lt;script&gt;") == 3
    assert "#9</b> (similarity 0.60, 0 tokens copied): (since deleted)" in out


def test_no_references_says_so():
    assert "No cached answer" in fmt.references_html(replace(STATS, references=(), article=None), {}, None)


def test_escape_markup_keeps_text_readable():
    assert fmt.escape_markup("a < b & <img src=x>") == "a &lt; b &amp; &lt;img src=x&gt;"


def test_time_saved_plot_adds_up_the_savings_in_serving_order():
    from webui import plots

    series = [
        {"created_at": datetime(2026, 11, 1, 9, tzinfo=UTC), "seconds_saved": 1.5},
        {"created_at": datetime(2026, 11, 1, 10, tzinfo=UTC), "seconds_saved": -0.25},
        {"created_at": datetime(2026, 11, 1, 11, tzinfo=UTC), "seconds_saved": 2.0},
    ]
    line = plots.time_saved(series).axes[0].lines[0]
    assert list(line.get_ydata()) == [1.5, 1.25, 3.25]
    assert [t.get_text() for t in plots.time_saved([]).axes[0].texts] == ["nothing yet"]


def test_stats_survive_a_round_trip_through_json():
    assert ReplyStats.from_json(STATS.to_json()) == STATS
    assert ReplyStats.from_json({**STATS.to_json(), "prompt_ids": [1, 2]}) == STATS  # extra stored keys are ignored


def test_a_grounded_reply_says_which_approved_answer_guided_it_and_how_much_was_copied():
    stats = replace(STATS, grounding=(ReferenceUse(7, 0.812, 14),))
    assert fmt.stats_line(stats).endswith(" · guided by approved answer #7 (44% copied from it)")
    assert "guided by" not in fmt.stats_line(STATS)
    out = fmt.references_html(stats, {7: entry(7, "q", "a")}, None)
    assert "Approved answer, in the prompt, <b>#7</b> (similarity 0.81, 14 tokens copied)" in out
