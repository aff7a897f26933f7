"""The one decision of how every reply is decoded: an engine's recipe (decoding/engine.py, decoding/recipe.py)."""

import pytest
import torch

from decoding import (
    AUTO,
    ONE_TOKEN,
    AdaptiveCopyPolicy,
    CostCurve,
    DecodeRecipe,
    EngineConfigError,
    LlmaOptions,
    StepWidth,
    build_engine,
    greedy_generate,
    llma_generate,
)
from tests.conftest import make_tiny_llama


def test_the_step_width_setting_parses_auto_one_token_and_a_width():
    assert StepWidth.parse("auto") == AUTO and StepWidth.parse(" AUTO ") == AUTO
    assert StepWidth.parse("0") == ONE_TOKEN and StepWidth.parse(0) == ONE_TOKEN
    assert StepWidth.parse("8") == StepWidth("fixed", 8) and str(StepWidth.parse(8)) == "8"
    for bad in ("-1", "wide", "", "4.5"):
        with pytest.raises(ValueError, match="step width must be auto, 0"):
            StepWidth.parse(bad)


def test_step_width_zero_on_a_packable_model_runs_and_names_transformers_forward():
    """The packed forward runs W-wide steps only: with one-token steps transformers' forward decodes, and the
    engine says so, for the engine line, the stats and the cost-curve keys alike."""
    model = make_tiny_llama()
    engine = build_engine(model, tokenizer=None, model_id="tiny", width=ONE_TOKEN)
    assert engine.model is model and engine.recipe == DecodeRecipe()  # transformers' forward, one-token steps
    assert engine.forward == "transformers" and engine.step_width is None
    assert "transformers forward, one-token decode steps" in engine.describe()


def test_a_fixed_width_on_a_packable_model_runs_the_packed_forward():
    engine = build_engine(make_tiny_llama(), tokenizer=None, model_id="tiny", width=StepWidth.parse(4))
    assert engine.model.packing == engine.recipe.packing and engine.recipe.prefill_chunk == 64
    assert engine.forward == "packed" and engine.step_width == 4
    assert engine.recipe.cross_granules == (engine.attention == "kernel")  # the granule rule, decided here only
    attention = ", lane-kernel attention" if engine.attention == "kernel" else ""
    assert f"packed forward{attention}, 4-wide decode steps" in engine.describe()
    assert engine.steps(100, 20).width == 4


def test_auto_asks_the_chooser_and_an_unused_chooser_is_never_called():
    asked = []
    engine = build_engine(make_tiny_llama(), None, "tiny", AUTO, choose_width=lambda model: asked.append(model) or 8)
    assert engine.step_width == 8 and engine.forward == "packed" and len(asked) == 1
    build_engine(make_tiny_llama(), None, "tiny", StepWidth.parse(4), choose_width=lambda model: asked.append(model))
    assert len(asked) == 1


def test_bfloat16_with_one_token_steps_is_refused_with_the_reason():
    model = make_tiny_llama().to(torch.bfloat16)
    with pytest.raises(EngineConfigError, match="bfloat16 with one-token steps.*differ from greedy"):
        build_engine(model, None, "tiny", ONE_TOKEN)
    with pytest.raises(EngineConfigError):  # "auto" that settles on one-token steps is refused the same way
        build_engine(make_tiny_llama().to(torch.bfloat16), None, "tiny", AUTO, choose_width=lambda model: None)
    assert build_engine(make_tiny_llama().to(torch.bfloat16), None, "tiny", StepWidth.parse(4)).step_width == 4


def test_llma_on_the_engine_equals_greedy_on_the_engine_either_forward():
    prompt = list(range(3, 40))
    for width in (ONE_TOKEN, StepWidth.parse(4)):
        engine = build_engine(make_tiny_llama(seed=3), None, "tiny", width)
        steps = engine.steps(len(prompt), 24)
        greedy = greedy_generate(engine.model, prompt, 24, eos_token_id=None, steps=steps)
        policy = AdaptiveCopyPolicy(cost=CostCurve((1, 2, 4, 8, 16), (1.0, 1.0, 1.0, 1.1, 1.3)))
        references = [greedy.tokens[5:], prompt[::-1]]
        llma = llma_generate(engine.model, prompt, references, policy, LlmaOptions(24, None), steps=steps)
        assert llma.tokens == greedy.tokens and llma.copied_tokens > 0


def test_the_weight_format_is_asked_of_the_chooser_only_for_auto_and_named_in_the_engine_line():
    model = make_tiny_llama().to(torch.bfloat16)
    asked = []
    engine = build_engine(model, None, "tiny", StepWidth.parse(4), weights="auto",
                          choose_format=lambda m: asked.append(m) or "int4")
    assert len(asked) == 1 and engine.weights == "int4" and engine.model.weights == "int4"
    attention = ", lane-kernel attention" if engine.attention == "kernel" else ""
    assert f"packed forward, int4 weights (dense prefill){attention}, 4-wide decode steps" in engine.describe()
    dense = build_engine(model, None, "tiny", StepWidth.parse(4), choose_format=lambda m: asked.append(m))
    assert len(asked) == 1 and dense.weights == "dense" and "weights" not in dense.describe()


def test_int_weights_are_refused_with_the_reason_where_they_cannot_run():
    with pytest.raises(EngineConfigError, match="int4 weights are not possible here.*bfloat16 activations"):
        build_engine(make_tiny_llama(), None, "tiny", StepWidth.parse(4), weights="int4")  # float32
    with pytest.raises(EngineConfigError, match="int8 weights are not possible here.*one-token steps"):
        build_engine(make_tiny_llama().to(torch.bfloat16), None, "tiny", ONE_TOKEN, weights="int8")
    with pytest.raises(EngineConfigError, match="weights must be one of auto, dense, int8, int4, q4"):
        build_engine(make_tiny_llama(), None, "tiny", StepWidth.parse(4), weights="q3")
    # "auto" where nothing but dense can run asks no one and packs dense
    engine = build_engine(make_tiny_llama(), None, "tiny", ONE_TOKEN, weights="auto", choose_format=None)
    assert engine.weights == "dense" and engine.forward == "transformers"


def test_an_engine_rebuilt_from_a_recipe_shares_its_forward_only_where_the_packing_is_the_same():
    model = make_tiny_llama().to(torch.bfloat16)
    engine = build_engine(model, None, "tiny", StepWidth.parse(4), weights="int8")
    wider = engine.rebuilt(DecodeRecipe.from_json({**engine.recipe.to_json(), "step_width": 8}))
    assert wider.model is engine.model and wider.recipe.step_width == 8 and wider.steps(10, 20).width == 8
    older = engine.rebuilt(DecodeRecipe.from_json({**engine.recipe.to_json(), "prefill_weights": "int8"}))
    assert older.model is not engine.model and older.model.packing == older.recipe.packing
    assert older.model.source is model and older.model.prefixes.max_bytes == 0  # no prompt chunks kept for it
    plain = engine.rebuilt(DecodeRecipe())
    assert plain.model is model and plain.forward == "transformers"
