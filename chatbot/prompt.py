"""Build the model's prompt for one chat turn: system prompt, help article, trimmed history, question."""

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# Measured with `python -m bench.quality` against the earlier "Answer the customer's question clearly and
# concisely, with numbered steps when there are steps." (and the approved answer in the system message): on 24
# held-out questions under the DRY rule, 29% instead of 42% of replies ran to the token limit and unsupported
# facts fell from 2.0 to 1.0 a reply; the approved answer as an earlier turn is copied more (75% vs 43% on
# "How do I reset my password?").
DEFAULT_SYSTEM_PROMPT = (
    "You are the customer support assistant for Nimbus Drive, a cloud file storage and sharing service. "
    "Answer in a few short numbered steps or sentences, using only the facts in the help article. "
    "Never make up prices, numbers or links. Stop as soon as the question is answered."
)


@dataclass(frozen=True)
class Message:
    """One message of the conversation before the question."""

    role: str  # "user" or "assistant"
    content: str


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    messages: list[dict]
    dropped_turns: int  # earlier turns left out so that prompt and reply fit the context window
    # How many of `ids` every prompt with this system prompt, article and approved answers begins with (the
    # messages before the conversation, `beginning_ids`): where its prefill chunks break (StepConfig.prefill_break).
    beginning: int = 0


class InputError(ValueError):
    """A message or history the service cannot use, with a text fit to show the user."""


def clean_text(text: str) -> str:
    """Drop control characters and lone surrogates; keep every script, emoji, newlines and tabs."""
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cs", "Co"))


def parse_history(history: object, max_chars: int) -> list[Message]:
    """Validate a chat history given as [{"role": ..., "content": ...}, ...]."""
    if history is None:
        return []
    if not isinstance(history, list | tuple):
        raise InputError("history must be a list of {role, content} messages")
    turns = []
    for i, item in enumerate(history):
        if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
            raise InputError(f"history item {i} must be an object with role 'user' or 'assistant'")
        content = item.get("content")
        if not isinstance(content, str):
            raise InputError(f"history item {i} needs a text 'content'")
        turns.append(Message(item["role"], clean_text(content)[:max_chars]))
    return turns


@dataclass(frozen=True)
class ApprovedAnswer:
    """A past question and the answer staff approved for it, shown to the model as an example to follow."""

    question: str
    answer: str


ARTICLE_HEADER = "Use this help article when it answers the question:"
# Where approved answers go: "system" (after the article, under APPROVED_HEADER), "turn" (as an earlier
# exchange, the approved question asked and answered, before the conversation) or "answer" (as under "turn", and
# the best one given once more as the answer to this very question, which is then asked again: see
# `answered_before`).
LAYOUTS = ("system", "turn", "answer")
APPROVED_HEADER = "An approved answer to a similar question (reuse its wording where it fits):"


def article_in_prompt(title: str, body: str) -> str:
    """A help article as the prompt shows it."""
    return f"{title}\n\n{body}"


def system_message(system_prompt: str, article: str | None, approved: Sequence[ApprovedAnswer] = ()) -> str:
    """The system prompt, then the help article, then approved answers (under the "system" layout)."""
    parts = [system_prompt]
    if article:
        parts.append(f"{ARTICLE_HEADER}\n\n{article}")
    parts += [f"{APPROVED_HEADER}\n\nQuestion: {a.question}\nAnswer: {a.answer}" for a in approved]
    return "\n\n".join(parts)


def head_messages(
    system_prompt: str, article: str | None, approved: Sequence[ApprovedAnswer], layout: str,
) -> list[dict]:
    """The messages before the conversation: the system message, and the approved answers as earlier turns under
    the "turn" and "answer" layouts."""
    if layout not in LAYOUTS:
        raise ValueError(f"prompt layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    in_system = approved if layout == "system" else ()
    as_turns = approved if layout != "system" else ()
    head = [{"role": "system", "content": system_message(system_prompt, article, in_system)}]
    return head + [m for a in as_turns for m in exchange(a.question, a.answer)]


def answered_before(question: str, approved: Sequence[ApprovedAnswer], layout: str) -> list[dict]:
    """Under the "answer" layout, the best approved answer given to this very question, right before the question
    is asked again; else nothing.

    A model asked again what it just answered gives that answer again, so the reply follows staff's text instead
    of making one up, and LLMA copies most of it: with the bundled 135M model, 69% of a grounded reply to 16
    held-out rewordings was copied from its approved answer, against 22% under "turn" and 10% under "system"
    (`python -m bench.service --copy-only --layout L`, docs/service/2026-12-02-layouts-epyc). Tried and not kept
    (4-token runs of the approved answer in the reply, the same rewordings): this exchange without the "turn" one
    before it, 76% against 88% with it; the answer in the system message under "reply with it word for word", 18%.
    The exchange about the approved question stays before the conversation, where it is part of the prompt
    beginning warmed at start (chatbot/warm.py); this one follows the question and is prefilled with it. The
    reply is still the model's own greedy reply to its prompt."""
    if layout != "answer" or not approved:
        return []
    return exchange(question, approved[0].answer)


def exchange(question: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def build_prompt(
    tokenizer,
    system_prompt: str,
    article: str | None,
    history: list[Message],
    question: str,
    max_prompt_tokens: int,
    approved: Sequence[ApprovedAnswer] = (),
    layout: str = "system",
) -> Prompt:
    """Chat-template the turn; the oldest history turns go first when the prompt is too long.

    Rule: the system prompt (with its article), the approved answers and the question are always kept;
    earlier turns are dropped oldest first, a user turn together with the answer that followed it.
    """
    head = head_messages(system_prompt, article, approved, layout)
    tail = [*answered_before(question, approved, layout), {"role": "user", "content": question}]
    # Count each turn once to find where to start, so a huge history costs one tokenization, not one per
    # dropped pair; the loop below then confirms with the real template (usually in one pass).
    dropped = _turns_that_do_not_fit(tokenizer, head, tail, history, max_prompt_tokens)
    turns = [{"role": t.role, "content": t.content} for t in history[dropped:]]
    while True:
        messages = [*head, *turns, *tail]
        ids = encode_messages(tokenizer, messages)
        if len(ids) <= max_prompt_tokens or not turns:
            break
        cut = 2 if len(turns) >= 2 and turns[0]["role"] == "user" else 1
        turns, dropped = turns[cut:], dropped + cut
    if len(ids) > max_prompt_tokens:
        raise InputError(
            f"The question is too long for the model ({len(ids)} tokens with the instructions; "
            f"the limit is {max_prompt_tokens}). Please shorten it."
        )
    return Prompt(ids=ids, messages=messages, dropped_turns=dropped, beginning=shared_beginning(tokenizer, head, ids))


def shared_beginning(tokenizer, head: list[dict], ids: list[int]) -> int:
    """How many of the prompt's `ids` are the head messages' own tokens; 0 where the template would not begin the
    prompt with them (then nothing is broken off)."""
    head_ids = template_ids(tokenizer, head)
    return len(head_ids) if ids[: len(head_ids)] == head_ids else 0


def beginning_ids(
    tokenizer, system_prompt: str, article: str | None, approved: Sequence[ApprovedAnswer] = (), layout: str = "system",
) -> list[int]:
    """The token ids every prompt with this article and these approved answers begins with, whatever the question
    and history after them (the messages before the conversation; under "answer" the best approved answer comes
    after it, with the question)."""
    return template_ids(tokenizer, head_messages(system_prompt, article, approved, layout))


def template_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The chat template's token ids of `messages`, without the prompt for a reply."""
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


def answer_places(prompt_ids: list[int], answer_ids: list[int]) -> list[range]:
    """Every span of a prompt's token ids that holds the answer's."""
    if not answer_ids:
        return []
    first, size = answer_ids[0], len(answer_ids)
    return [range(start, start + size) for start in range(len(prompt_ids) - size + 1)
            if prompt_ids[start] == first and prompt_ids[start : start + size] == answer_ids]


def _turns_that_do_not_fit(tokenizer, head: list[dict], tail: list[dict], history: list[Message], limit: int) -> int:
    """How many of the oldest turns to leave out, estimated from per-turn token counts (whole pairs)."""
    base = len(encode_messages(tokenizer, [*head, *tail]))
    overhead = len(encode_messages(tokenizer, [*head, {"role": "user", "content": ""}, *tail])) - base
    budget, first = limit - base, len(history)
    for i in range(len(history) - 1, -1, -1):
        budget -= len(tokenizer(history[i].content, add_special_tokens=False)["input_ids"]) + overhead
        if budget < 0:
            break
        first = i
    while first < len(history) and history[first].role != "user":
        first += 1
    return first


def answer_token_ids(tokenizer, answer: str) -> list[int]:
    """Token ids of a written answer as decoding copies them: the text, then end of sequence."""
    return [*tokenizer(answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]


def encode_messages(tokenizer, messages: list[dict]) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


def context_key(history: list[Message]) -> str:
    """Hash of the conversation a question was asked in; equal contexts give equal prompts."""
    payload = json.dumps([[t.role, t.content] for t in history], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def prompt_hash(system_prompt: str, article_ids: list[str], settings: dict) -> str:
    """Hash of everything besides the conversation that shapes the prompt and the decode."""
    payload = json.dumps({"system": system_prompt, "articles": article_ids, "settings": settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]
