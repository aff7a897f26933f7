"""Concurrent chat turns share the packed forward and store exactly the replies they store one after another."""

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from chatbot import ChatService, ChatSettings, Reply, Seed
from decoding import CostCurve, StepWidth, build_engine, load_model
from tests.decoding.test_bundled_model import QUESTIONS  # five support questions, one per topic
from tests.formats import RUN_WEIGHTS
from tests.threads import run_at_once

pytestmark = pytest.mark.slow

MODEL_ID = "SmolLM2-135M-Instruct"
# A fixed cost curve (test_service.py's), so that copy decisions do not depend on the machine's load.
CPU_CURVE = CostCurve(sizes=(1, 2, 4, 8, 16, 32, 64), seconds=(0.075, 0.110, 0.115, 0.120, 0.150, 0.190, 0.300))

SETTINGS = ChatSettings.decoding_only(max_new_tokens=32)
WAIT_S = 300.0  # five 32-token replies take seconds; this only bounds a broken scheduler


@pytest.fixture(scope="module")
def engine():
    """The bundled model in bfloat16, packed dense (q4 where bf16 is emulated: tests/formats.py), 4-wide steps: on
    the Xeon with AMX its short blocks run unpadded alone and are padded in company (Scheduler.checked)."""
    model, tokenizer = load_model(dtype=torch.bfloat16)
    return build_engine(model, tokenizer, MODEL_ID, StepWidth.parse(4), weights=RUN_WEIGHTS)


@pytest.fixture(scope="module")
def seeded_dir(engine, tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("seeded") / "data"
    ChatService.open(engine, data_dir, settings=SETTINGS, cost=CPU_CURVE).cache.close()
    return data_dir


def open_service(engine, seeded_dir: Path, data_dir: Path, settings: ChatSettings = SETTINGS) -> ChatService:
    shutil.copytree(seeded_dir, data_dir, ignore=shutil.ignore_patterns("*.lock"))
    return ChatService.open(engine, data_dir, settings=settings, cost=CPU_CURVE)


def ask_at_once(service: ChatService, questions: list[str]) -> list[Reply]:
    """Every question in its own thread, as the web app's workers ask them."""
    asks = [lambda i=i, q=q: service.ask(q, session_id=f"customer-{i}") for i, q in enumerate(questions)]
    replies = run_at_once(asks, WAIT_S)
    assert all(isinstance(r, Reply) for r in replies), replies
    return replies


def stored(service: ChatService, reply: Reply) -> tuple[str, list[int]]:
    row = service.cache.get_reply(reply.id)
    return row.answer, row.token_ids


def test_concurrent_turns_store_the_replies_of_turns_one_after_another(engine, seeded_dir, tmp_path):
    one_by_one = open_service(engine, seeded_dir, tmp_path / "sequential")
    at_once = open_service(engine, seeded_dir, tmp_path / "concurrent")
    try:
        assert "replies share each forward" in at_once.describe()
        sequential = [one_by_one.ask(q, session_id=f"customer-{i}") for i, q in enumerate(QUESTIONS)]
        concurrent = ask_at_once(at_once, QUESTIONS)
        assert [stored(at_once, r) for r in concurrent] == [stored(one_by_one, r) for r in sequential]
        assert all(r.stats.shared_with == 0 for r in sequential)
        assert any(r.stats.shared_with > 0 for r in concurrent)  # they did share forwards
        assert at_once.verify(concurrent[0].id).identical  # Verify's greedy goes through the scheduler too
    finally:
        one_by_one.cache.close()
        at_once.cache.close()


def test_warmed_prompt_beginnings_serve_later_prompts_and_change_no_reply(engine, tmp_path):
    """The help centre's prompt beginnings, prefilled while idle, are what the questions' prompts take from the
    prefix cache; every reply is the one a cold cache gives. Two articles and their approved answers (the shipped
    help centre takes half a minute to warm)."""
    shipped = Seed.shipped()
    answers = shipped.answers[:2]
    seed = Seed({a.article: shipped.articles[a.article] for a in answers}, answers)
    questions = [a.question for a in answers]
    prefixes = engine.model.prefixes
    prefixes.clear()
    cold = ChatService.open(engine, tmp_path / "cold", settings=SETTINGS, seed=seed, cost=CPU_CURVE)
    warm = None
    try:
        cold_replies = [cold.ask(q) for q in questions]
        assert cold_replies[0].stats.prompt_reused == 0  # nothing before it
        prefixes.clear()
        computed = prefixes.stats.computed_tokens
        warm = ChatService.open(engine, tmp_path / "warm", settings=replace(SETTINGS, warm_prefixes=True),
                                seed=seed, cost=CPU_CURVE)
        assert warm.scheduler.wait_warm(WAIT_S)
        assert len(prefixes) > 0 and prefixes.stats.computed_tokens == computed  # held, and not counted as prompts'
        warm_replies = [warm.ask(q) for q in questions]
        assert [stored(warm, r) for r in warm_replies] == [stored(cold, r) for r in cold_replies]
        assert all(r.stats.grounding for r in warm_replies)  # so their prompts begin as a warmed beginning does
        # Each prompt took its whole beginning from the warm-up, its chunks breaking where the beginning ends, and
        # computed only what follows it (the question, and under the "answer" layout the approved answer again).
        assert all(256 < r.stats.prompt_reused == r.stats.prefill_break for r in warm_replies), \
            [(r.stats.prompt_reused, r.stats.prefill_break) for r in warm_replies]
        assert warm.verify(warm_replies[0].id).identical
    finally:
        cold.cache.close()
        if warm is not None:
            warm.cache.close()
