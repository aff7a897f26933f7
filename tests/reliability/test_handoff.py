"""A first question that no approved answer and no help article covers, asked of the running app with its
default settings: the hand-off message comes back undecoded, and staff find the question on the Dashboard."""

import pytest

from chatbot.settings import DEFAULT_HANDOFF_MESSAGE
from tests.reliability.app_process import App, entry_questions, replies_table

pytestmark = pytest.mark.slow

UNCOVERED = "What's a good name for a cat?"  # a shipped novel question (data/questions.jsonl)


def test_a_question_nothing_covers_gets_the_hand_off_message_not_a_made_up_reply(server: App, chat_client):
    text, stats = chat_client.predict(UNCOVERED, [], api_name="/chat")
    assert text == DEFAULT_HANDOFF_MESSAGE
    assert (stats["stop_reason"], stats["tokens"], stats["forward_passes"], stats["notice"]) == (
        "handed off", 0, 0, "")
    stored = replies_table(server.data_dir)[stats["reply_id"]]
    assert (stored["answer"], stored["entry_id"]) == (DEFAULT_HANDOFF_MESSAGE, None)
    assert UNCOVERED not in entry_questions(server.data_dir).values()  # no answer cached for it
    # The hand-off is no conversation: a second question nothing covers is handed off too.
    handed = [{"role": "user", "content": UNCOVERED}, {"role": "assistant", "content": text}]
    _, again = chat_client.predict("Please answer anyway: what's a good name for a cat?", handed, api_name="/chat")
    assert again["stop_reason"] == "handed off"
    # After a decoded reply, a follow-up is decoded: the conversation is something to go on.
    history = [{"role": "user", "content": "How do I reset my password?"},
               {"role": "assistant", "content": "Click Forgot password on the sign-in page."}]
    _, follow_up = chat_client.predict("And what's a good name for a cat?", history, api_name="/chat")
    assert follow_up["stop_reason"] != "handed off" and follow_up["tokens"] > 0
