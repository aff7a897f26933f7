"""The bundled SmolLM2-135M-Instruct: our greedy loop equals transformers', and LLMA equals greedy."""

import json

import pytest
import torch

from decoding import (
    AdaptiveCopyPolicy,
    FixedCopyPolicy,
    LlmaOptions,
    ModelLoadError,
    greedy_generate,
    llma_generate,
    load_model,
    measure_cost_curve,
)

pytestmark = pytest.mark.slow

QUESTIONS = [
    "How do I reset my password?",
    "Can I get a refund for my annual plan?",
    "How do I share a folder with someone outside my team?",
    "Why is the desktop app not syncing my files?",
    "How do I turn on two-factor authentication?",
]


def chat_ids(tokenizer, question: str) -> list[int]:
    messages = [
        {"role": "system", "content": "You are a helpful support assistant."},
        {"role": "user", "content": question},
    ]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])


def test_greedy_generate_equals_transformers_generate(bundled):
    model, tokenizer = bundled
    ids = chat_ids(tokenizer, QUESTIONS[0])
    ours = greedy_generate(model, ids, 48, eos_token_id=tokenizer.eos_token_id)
    theirs = model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False)[0, len(ids) :].tolist()
    assert ours.tokens == theirs
    assert ours.forward_passes == len(ours.tokens)


def test_llma_equals_greedy_with_helpful_and_useless_references(bundled):
    model, tokenizer = bundled
    eos = tokenizer.eos_token_id
    answers = {q: greedy_generate(model, chat_ids(tokenizer, q), 40, eos_token_id=eos).tokens for q in QUESTIONS[:4]}
    useless = tokenizer("Our office is closed on public holidays. " * 8)["input_ids"]
    copied_somewhere = 0
    policy = AdaptiveCopyPolicy(cost=measure_cost_curve(model, sizes=(1, 4, 16), repeats=1))
    for i, question in enumerate(QUESTIONS[:3]):
        ids = chat_ids(tokenizer, question)
        neighbour = answers[QUESTIONS[(i + 1) % len(QUESTIONS)]]
        for references in ([answers[question], useless], [neighbour, useless]):
            out = llma_generate(model, ids, references, policy, LlmaOptions(40, eos))
            assert out.tokens == answers[question], question
            copied_somewhere += out.copied_tokens
    assert copied_somewhere > 0


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(tmp_path / "nope")


def test_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(tmp_path)


def test_non_causal_model_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ModelLoadError, match="not a causal LM"):
        load_model(tmp_path)


def test_corrupt_weights_are_a_clear_error(tmp_path):
    from tests.conftest import make_tiny_llama

    make_tiny_llama().save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError):
        load_model(tmp_path)


def test_loads_another_local_llama_folder(tmp_path, bundled):
    from tests.conftest import make_tiny_llama

    _, tokenizer = bundled
    make_tiny_llama(vocab_size=len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, loaded_tokenizer = load_model(tmp_path)
    ids = chat_ids(loaded_tokenizer, "hello")
    llma = llma_generate(model, ids, [[1, 2, 3]], FixedCopyPolicy(), LlmaOptions(8))
    assert greedy_generate(model, ids, 8).tokens == llma.tokens
