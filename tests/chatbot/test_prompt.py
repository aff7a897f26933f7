"""build_prompt's history trimming, on the bundled tokenizer (no model weights): what is kept, and at what cost."""

import pytest
from transformers import AutoTokenizer

from chatbot.prompt import (
    ApprovedAnswer,
    InputError,
    Message,
    beginning_ids,
    build_prompt,
    encode_messages,
    shared_beginning,
)
from decoding.model_loading import DEFAULT_MODEL_DIR


class CountingTokenizer:
    """The real tokenizer, counting how often the chat template and the plain tokenizer run."""

    def __init__(self, tokenizer) -> None:
        self.inner, self.templates, self.calls = tokenizer, 0, 0

    def apply_chat_template(self, *args, **kwargs):
        self.templates += 1
        return self.inner.apply_chat_template(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


@pytest.fixture(scope="module")
def tokenizer():
    if not (DEFAULT_MODEL_DIR / "tokenizer.json").is_file():
        pytest.skip("the bundled model has not been prepared (make setup)")
    return AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)


def history(pairs: int, words: int = 40) -> list[Message]:
    turns = []
    for i in range(pairs):
        turns += [
            Message("user", f"question {i} " + "word " * words), Message("assistant", f"answer {i} " + "text " * words)
        ]
    return turns


def test_short_history_is_kept_whole(tokenizer):
    prompt = build_prompt(tokenizer, "Be helpful.", None, history(2), "And now?", 2000)
    assert prompt.dropped_turns == 0
    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert prompt.ids == encode_messages(tokenizer, prompt.messages)


def test_oldest_pairs_go_first_and_the_rest_fits(tokenizer):
    turns = history(30)
    prompt = build_prompt(tokenizer, "Be helpful.", "An article.", turns, "And now?", 600)
    assert 0 < prompt.dropped_turns < len(turns) and prompt.dropped_turns % 2 == 0  # whole pairs only
    assert len(prompt.ids) <= 600
    assert prompt.messages[1]["content"] == turns[prompt.dropped_turns].content  # the newest turns are kept
    assert prompt.messages[-1] == {"role": "user", "content": "And now?"}
    assert "An article." in prompt.messages[0]["content"]
    # As many turns as fit: one more pair would not.
    kept_plus_one = turns[prompt.dropped_turns - 2 :]
    one_more = build_prompt(tokenizer, "Be helpful.", "An article.", kept_plus_one, "And now?", 10**6)
    assert len(one_more.ids) > 600


@pytest.mark.parametrize("pairs", [10, 100])
def test_trimming_costs_one_tokenization_per_turn_not_per_dropped_pair(tokenizer, pairs):
    counting = CountingTokenizer(tokenizer)
    prompt = build_prompt(counting, "Be helpful.", None, history(pairs), "And now?", 400)
    assert prompt.dropped_turns > 0
    assert counting.calls <= 2 * pairs  # each turn's text once
    assert counting.templates <= 4  # two to size the template, then one or two to confirm


def test_a_question_too_long_for_the_model_is_refused_clearly(tokenizer):
    with pytest.raises(InputError, match="too long for the model"):
        build_prompt(tokenizer, "Be helpful.", None, [], "word " * 2000, 500)


def test_the_turn_layout_puts_approved_answers_before_the_conversation_and_keeps_them(tokenizer):
    from chatbot.prompt import APPROVED_HEADER, ApprovedAnswer

    approved = [ApprovedAnswer("How do I reset my password?", "1. Open Settings.\n2. Choose Reset password.")]
    full = build_prompt(tokenizer, "SYSTEM", "Article", history(2), "I forgot it", 4000, approved, layout="turn")
    roles = [m["role"] for m in full.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert full.messages[1]["content"] == approved[0].question and full.messages[2]["content"] == approved[0].answer
    assert APPROVED_HEADER not in full.messages[0]["content"] and "Article" in full.messages[0]["content"]
    trimmed = build_prompt(tokenizer, "SYSTEM", "Article", history(40), "I forgot it", 600, approved, layout="turn")
    assert trimmed.dropped_turns > 0 and trimmed.messages[2]["content"] == approved[0].answer
    in_system = build_prompt(tokenizer, "SYSTEM", "Article", [], "I forgot it", 4000, approved)
    assert [m["role"] for m in in_system.messages] == ["system", "user"]
    assert APPROVED_HEADER in in_system.messages[0]["content"]
    with pytest.raises(ValueError, match="prompt layout"):
        build_prompt(tokenizer, "SYSTEM", None, [], "q", 4000, approved, layout="sideways")


def test_the_answer_layout_gives_the_approved_answer_to_this_very_question_right_before_it_is_asked_again(tokenizer):
    from chatbot.prompt import APPROVED_HEADER, ApprovedAnswer

    approved = [ApprovedAnswer("How do I reset my password?", "1. Open Settings.\n2. Choose Reset password."),
                ApprovedAnswer("How do I change my email?", "Open Settings > Account > Email.")]
    full = build_prompt(tokenizer, "SYSTEM", "Article", history(2), "I forgot it", 4000, approved, layout="answer")
    roles = [m["role"] for m in full.messages]
    assert roles == ["system", *["user", "assistant"] * 5, "user"]
    # Every approved answer is an earlier exchange about its own question, as under "turn"; the best one is also
    # the answer to the question itself, after the conversation, so that the question is what was last answered.
    assert [m["content"] for m in full.messages[1:5]] == [approved[0].question, approved[0].answer,
                                                          approved[1].question, approved[1].answer]
    assert [m["content"] for m in full.messages[-3:]] == ["I forgot it", approved[0].answer, "I forgot it"]
    assert APPROVED_HEADER not in full.messages[0]["content"]
    trimmed = build_prompt(tokenizer, "SYSTEM", "Article", history(40), "I forgot it", 600, approved[:1], "answer")
    assert trimmed.dropped_turns > 0 and len(trimmed.ids) <= 600
    assert [m["content"] for m in trimmed.messages[-3:]] == ["I forgot it", approved[0].answer, "I forgot it"]
    assert trimmed.messages[1]["content"] == approved[0].question
    bare = build_prompt(tokenizer, "SYSTEM", "Article", [], "I forgot it", 4000, (), layout="answer")
    assert [m["role"] for m in bare.messages] == ["system", "user"]


@pytest.mark.parametrize("layout", ["turn", "system", "answer"])
def test_a_prompt_begins_with_the_beginning_warmed_for_its_article_and_approved_answer(tokenizer, layout):
    article = "Reset your password\n\nOpen Settings, then Security, then Reset password."
    approved = [ApprovedAnswer("How do I reset my password?", "Open Settings > Security > Reset password.")]
    history = [Message("user", "hi"), Message("assistant", "Hello! How can I help?")]
    beginning = beginning_ids(tokenizer, "Be brief.", article, approved, layout)
    for turns in ([], history):
        prompt = build_prompt(tokenizer, "Be brief.", article, turns, "i forgot my password", 4096, approved, layout)
        assert prompt.ids[: len(beginning)] == beginning
        assert prompt.beginning == len(beginning)  # where its prefill chunks break (StepConfig.prefill_break)
        assert len(prompt.ids) > len(beginning) + 5  # the question follows
    other = beginning_ids(tokenizer, "Be brief.", article, (), layout)
    assert other != beginning
    head = [{"role": "system", "content": "Be brief."}]
    assert shared_beginning(tokenizer, head, [1, 2, 3]) == 0  # not the head's tokens: nothing is broken off
