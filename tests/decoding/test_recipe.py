"""One recipe for how a reply is decoded (decoding/recipe.py): stored with every reply, read back as it ran, and all
staff's Verify needs to rebuild the reply's engine."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from chatbot import ChatService, ChatSettings, Seed
from chatbot.stats import ReplyStats
from decoding import CostCurve, DecodeRecipe, StepWidth, build_engine
from decoding.model_loading import DEFAULT_MODEL_DIR
from decoding.recipe import TRANSFORMERS, Packing, packing_of
from decoding.steps import ONE_TOKEN_STEPS, StepConfig
from tests.conftest import make_tiny_llama

KERNEL_INT4 = DecodeRecipe.of(Packing("packed", "int4", "dense", "kernel", "kernel"), 8, padded_steps=False)


def test_a_recipe_reads_back_from_its_json_and_from_a_reply_s_stored_fields():
    assert DecodeRecipe.from_json(KERNEL_INT4.to_json()) == KERNEL_INT4
    stored = {**KERNEL_INT4.to_json(), "tokens": 12, "prefill_chunk": 64, "speedup": 2.5}  # other stats ignored
    assert DecodeRecipe.from_json(stored) == KERNEL_INT4


def test_fields_a_reply_was_stored_without_read_as_it_ran():
    """Before the prefill format was stored it was the steps' format; before chunks, 0; the granule rule is the
    attention's; a transformers reply stored one-token steps as no width."""
    old = {"forward": "packed", "weights": "int4", "prefill_weights": "", "attention": "kernel",
           "prefill_attention": "sdpa", "step_width": 4, "padded_steps": True, "prefill_chunk": 0}
    recipe = DecodeRecipe.from_json(old)
    assert (recipe.prefill_weights, recipe.prefill_chunk, recipe.cross_granules) == ("int4", None, True)
    assert DecodeRecipe.from_json({"forward": "transformers", "step_width": None}) == DecodeRecipe()
    assert DecodeRecipe.from_json({}) == DecodeRecipe() and DecodeRecipe().packing == TRANSFORMERS


def test_the_step_shape_of_a_stored_reply_is_the_one_its_engine_gave():
    steps = KERNEL_INT4.steps(300, 200, beginning=130)
    assert steps == KERNEL_INT4.stored_steps(steps.cache_len, prefill_break=130)
    assert (steps.width, steps.padded, steps.prefill_chunk, steps.cross_granules) == (8, False, 64, True)
    assert DecodeRecipe().steps(300, 200) == DecodeRecipe().stored_steps(None) == ONE_TOKEN_STEPS
    sdpa = replace(KERNEL_INT4, attention="sdpa", prefill_attention="sdpa", cross_granules=False)
    assert sdpa.stored_steps(512) == StepConfig(8, 512, padded=False, prefill_chunk=64)


def test_a_recipe_refuses_what_no_engine_runs():
    with pytest.raises(ValueError, match="fixed-width steps only"):
        DecodeRecipe(forward="packed")
    with pytest.raises(ValueError, match="not a decode recipe"):
        DecodeRecipe(attention="flash")
    with pytest.raises(ValueError, match="at least 1"):
        DecodeRecipe(step_width=0)  # one-token steps are None, spelled one way


def test_the_engine_line_reads_the_recipe():
    assert KERNEL_INT4.describe() == (
        "packed forward, int4 weights (dense prefill), lane-kernel attention, 8-wide decode steps, short ones unpadded")
    assert DecodeRecipe().describe() == "transformers forward, one-token decode steps"
    assert packing_of(make_tiny_llama()) == TRANSFORMERS  # a transformers model carries no packing of its own


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)


def test_verify_rebuilds_a_reply_s_engine_from_its_stored_recipe_alone(tmp_path: Path, tokenizer):
    """A reply decoded under one recipe (int4 steps, 2 wide and padded, its prompt prefilled in int4 through SDPA),
    verified by a service whose engine runs another (4-wide, dense prefills): Verify reads the reply's recipe from
    its stored stats, rebuilds that forward and step shape, and gets the reply's tokens back bit for bit."""
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=3).to(torch.bfloat16)
    settings, curve = ChatSettings.decoding_only(max_new_tokens=16), CostCurve(sizes=(1, 2), seconds=(0.1, 0.1))
    engine = build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights="int4")
    older = engine.rebuilt(replace(engine.recipe, prefill_weights="int4", prefill_attention="sdpa", step_width=2,
                                   padded_steps=True))
    service = ChatService.open(older, tmp_path, settings=settings, seed=Seed(), cost=curve)
    before = service.ask("How do I reset my password?")
    if service.scheduler is not None:
        service.scheduler.close()

    service = ChatService.open(engine, tmp_path, settings=settings, seed=Seed(), cost=curve)
    stored = ReplyStats.from_json(service.cache.get_reply(before.id).stats)
    assert stored.recipe() == older.recipe != engine.recipe
    rebuilt = service._model_for(stored)
    assert rebuilt is not engine.model and rebuilt.packing == older.recipe.packing
    assert service.verify(before.id).identical
    after = service.ask("Can I change the email address of my account?", session_id="another")
    assert after.stats.recipe() == engine.recipe and service._model_for(after.stats) is engine.model
    assert service.verify(after.id).identical
