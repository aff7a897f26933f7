"""The chat page's handlers against a stand-in service: streaming, stopping, bad input, feedback, the API."""

from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from chatbot import Admission, ChatLimits, InputError, Reply, ReplyReferences, ReplyStats, Span
from webui.chat_page import ChatPage, user_bubble

STATS = ReplyStats(
    tokens=3, forward_passes=2, copied_tokens=1, seconds=0.5, tokens_per_second=6.0, greedy_seconds_estimate=0.75,
    speedup=1.5, speedup_method="estimate", exact_hit=False, copied_share=0.33, tokens_per_forward_pass=1.5,
)


class FakeService:
    """Streams 'one two three' word by word and 'stores' it only when the stream runs to its end."""

    def __init__(self) -> None:
        self.stored, self.closed, self.feedback_given = [], False, []

    def stream(self, question, history, session_id=""):
        if not question.strip():
            raise InputError("Please type a question.")
        try:
            for words in ("one", "one two", "one two three"):
                yield Reply(words, replace(STATS, tokens=len(words.split())))
            self.stored.append(question)
            yield Reply("one two three", STATS, done=True, id=41, spans=[Span(0, 3, "prompt")])
        finally:
            self.closed = True

    def ask(self, question, history=None, session_id=""):
        *_, final = self.stream(question, history, session_id)
        return final

    def references(self, reply):
        return ReplyReferences(entries={}, article=None)

    def feedback(self, reply_id, value, reason=""):
        self.feedback_given.append((reply_id, value, reason))


@pytest.fixture
def page() -> ChatPage:
    return ChatPage(FakeService(), ["How do I reset my password?"], Admission(ChatLimits(queue_size=2, per_client=1)))


def start(page: ChatPage, question: str = "Hi?"):
    messages = [user_bubble(question)]
    return page.respond(question, messages, [], {}, request=None)


def test_reply_grows_then_keeps_the_turn_and_its_reply_id(page):
    outputs = list(start(page))
    partial_texts = [out[0][-1]["content"] for out in outputs[:3]]
    assert partial_texts == ["one", "one two", "one two three"]
    shown, _, turns, replies, details, _ = outputs[-1]
    assert "forward passes" in shown[-1]["content"]
    assert turns == [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "one two three"}]
    assert replies["1"]["reply_id"] == 41 and "<mark" in details
    assert page.service.stored == ["Hi?"]


def test_stopping_closes_the_stream_and_nothing_is_stored(page):
    stream = start(page)
    next(stream)
    assert page.admission.waiting == 1
    stream.close()  # what Gradio does when the Stop button cancels the event
    assert page.service.closed and page.service.stored == [] and page.admission.waiting == 0


def test_bad_input_goes_back_to_the_textbox_and_nothing_is_stored(page):
    with pytest.warns(UserWarning, match="Please type a question"):
        outputs = list(start(page, "   "))
    shown, _, _, _, _, textbox = outputs[-1]
    assert shown == [] and textbox == "   " and page.service.stored == []


def test_user_text_is_shown_as_typed():
    assert user_bubble("<img src=x onerror=alert(1)>")["content"] == "&lt;img src=x onerror=alert(1)&gt;"


def test_stop_marks_an_unfinished_reply_but_not_a_finished_one(page):
    partial = [user_bubble("Hi?"), {"role": "assistant", "content": "one two"}]
    assert "Stopped" in page.stop(partial, {})[0][-1]["content"]
    assert page.stop(partial, {"1": {"reply_id": 41, "details": ""}})[0] == partial


def test_feedback_only_for_this_sessions_replies(page):
    replies = {"1": {"reply_id": 41, "details": ""}}
    rating, note = page.rate(replies, "clear", SimpleNamespace(index=1, liked=False))
    assert rating == {"reply_id": 41, "value": -1} and note
    assert page.rate(replies, "", SimpleNamespace(index=3, liked=True)) == (None, "")
    page.send_reason(rating, "too short")
    assert page.rate(replies, "", SimpleNamespace(index=1, liked="")) == (None, "Your rating was removed.")
    assert page.service.feedback_given == [(41, -1, "clear"), (41, -1, "too short"), (41, 0, "")]


def test_api_returns_text_and_stats_and_a_clear_error(page):
    text, stats = page.chat("Hi?", None)
    assert text == "one two three" and stats["reply_id"] == 41 and stats["speedup"] == 1.5
    with pytest.raises(gr.Error, match="Please type a question"):
        page.chat("", [])


def test_a_question_over_the_limit_is_refused_at_once_and_not_stored(page):
    waiting = start(page)
    next(waiting)  # this session's one place in the line is taken (request=None: session "", address "")
    with pytest.raises(gr.Error, match="already have 1"):
        page.chat("Another?", [])
    with pytest.warns(UserWarning, match="not saved"):
        outputs = list(start(page, "And another?"))
    shown, _, _, _, _, textbox = outputs[-1]
    assert shown == [] and textbox == "And another?"
    list(waiting)
    assert page.service.stored == ["Hi?"] and page.admission.waiting == 0
