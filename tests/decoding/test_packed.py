"""The packed forward: the same model as transformers' forward, and bit-identical to itself in every row of a block."""

import json
from dataclasses import replace

import pytest
import torch

from decoding import (
    AUTO,
    FixedCopyPolicy,
    LlmaOptions,
    PackedLlama,
    StepConfig,
    build_engine,
    choose_step_width,
    choose_weights,
    cost_model,
    greedy_generate,
    llma_generate,
)
from decoding.batch_probe import short_block_mismatches
from decoding.cost_curve import FLAT_TOLERANCE, STEP_WIDTHS, UNPADDED_WIDTH, CostCurve
from decoding.engine import StepWidth, needs_padding, pack_model
from decoding.packed import Lane
from decoding.packing import packing_refusal, prompt_weights
from decoding.prefix_cache import PrefixCache
from decoding.runners import PackedRunner, open_runner
from decoding.weights import format_refusal, int4_weight, q4_refusal, q4_weight

from .invariance import VOCAB, differing_positions, make_tiny_model
from .test_invariance import CONTEXT_LEN, DTYPES, WINDOWS, hostile_mismatches, random_ids

PACKED_ARCHS = ["llama", "mistral", "qwen2"]
STEPS = StepConfig(width=8, cache_len=512)
NO_Q4 = pytest.mark.skipif(q4_refusal() is not None, reason=f"no q4 here: {q4_refusal()}")
INT_FORMATS = ["int8", "int4", pytest.param("q4", marks=NO_Q4)]


def tiny_packed(arch: str, dtype: torch.dtype, seed: int = 0, weights: str = "dense", **overrides) -> PackedLlama:
    return PackedLlama(make_tiny_model(arch, dtype, seed, **overrides), weights=weights)


@torch.inference_mode()
@pytest.mark.parametrize(
    ("arch", "overrides"), [("llama", {}), ("mistral", {}), ("mistral", {"sliding_window": 8}), ("qwen2", {})]
)
def test_packed_logits_equal_transformers_in_fp32(arch, overrides):
    """Prefill and W-wide steps over a growing context agree with one transformers forward of the whole text."""
    model = make_tiny_model(arch, torch.float32, seed=3, **overrides)
    ids = random_ids(seed=9, n=120)
    whole = model(input_ids=torch.tensor([ids])).logits[0]  # (120, V)
    runner = open_runner(PackedLlama(model), STEPS)
    rows, start = [runner.prefill(ids[:30])], 30
    while start < len(ids):  # positions cross the 64-key granule: blocks are cut there
        block = ids[start : start + STEPS.block_len(start)]
        rows.extend(runner.step(block))
        start += len(block)
    packed = torch.stack(rows)[: len(ids) - 29]
    torch.testing.assert_close(packed, whole[29:], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_packed_logits_are_bit_identical_in_every_row_of_a_block(arch, dtype):
    model = tiny_packed(arch, DTYPES[dtype])
    ids = random_ids(seed=len(arch), n=CONTEXT_LEN)
    for width, prompt_len, end in WINDOWS:
        steps = StepConfig(width, cache_len=512)
        assert differing_positions(model, ids[:end], prompt_len, steps) == [], (width, prompt_len)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_packed_llma_equals_packed_greedy_with_hostile_references(arch, dtype):
    model = tiny_packed(arch, DTYPES[dtype], seed=1)
    prompt = random_ids(seed=7, n=12)
    greedy = greedy_generate(model, prompt, 60, steps=STEPS)
    assert greedy.forward_passes == 60
    assert hostile_mismatches(model, prompt, greedy.tokens, STEPS, seed=3) == []


@pytest.mark.parametrize("weights", INT_FORMATS)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_int_weights_keep_every_row_of_a_block_bit_identical(arch, weights):
    """int8 and int4 weights (bf16 activations): row 0 of a padded step equals every row of a block, bit for bit."""
    model = tiny_packed(arch, torch.bfloat16, weights=weights)
    ids = random_ids(seed=len(arch), n=CONTEXT_LEN)
    for width, prompt_len, end in WINDOWS:
        assert differing_positions(model, ids[:end], prompt_len, StepConfig(width, cache_len=512)) == [], width


@pytest.mark.parametrize("weights", INT_FORMATS)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_int_weights_llma_equals_their_greedy_with_hostile_references(arch, weights):
    model = tiny_packed(arch, torch.bfloat16, seed=1, weights=weights)
    prompt = random_ids(seed=7, n=12)
    greedy = greedy_generate(model, prompt, 60, steps=STEPS)
    assert hostile_mismatches(model, prompt, greedy.tokens, STEPS, seed=3) == []


@pytest.mark.parametrize("weights", INT_FORMATS)
@pytest.mark.parametrize("arch", PACKED_ARCHS)
def test_int_weights_give_a_row_its_bits_in_a_short_block_so_blocks_run_unpadded(arch, weights):
    """The int kernels compute each row from that row alone: k < W rows run as they are equal the same rows
    padded to W, so greedy and LLMA unpadded equal padded greedy, with hostile references too."""
    model = tiny_packed(arch, torch.bfloat16, seed=1, weights=weights)
    assert short_block_mismatches(model, 4) == [] and short_block_mismatches(model, 8) == []
    prompt = random_ids(seed=7, n=12)
    greedy = greedy_generate(model, prompt, 60, steps=STEPS).tokens
    unpadded = replace(STEPS, padded=False)
    assert greedy_generate(model, prompt, 60, steps=unpadded).tokens == greedy
    assert hostile_mismatches(model, prompt, greedy, unpadded, seed=3) == []


def test_an_engine_runs_short_blocks_unpadded_only_where_the_probe_allows(monkeypatch):
    engine = build_engine(make_tiny_model("llama", torch.bfloat16, 0), None, "tiny", StepWidth.parse(4), weights="int4")
    assert engine.padded_steps is False and engine.steps(10, 20).padded is False
    assert "unpadded" in engine.describe()
    model = tiny_packed("llama", torch.bfloat16, weights="int4")
    honest = model.forward_lanes

    def rounding_by_row_count(lanes, last_only=False):  # a kernel whose rows change with the block's length
        return [rows + 0.5 * rows.shape[0] for rows in honest(lanes, last_only)]

    monkeypatch.setattr(model, "forward_lanes", rounding_by_row_count)
    assert short_block_mismatches(model, 4) == [1, 2, 3]
    assert needs_padding(model, 4) is True
    assert needs_padding(model.source, 4) is True  # transformers' forward: always padded
    assert StepConfig(4, 64).pad([7]) == [7, 7, 7, 7] and StepConfig(4, 64, padded=False).pad([7]) == [7]


@torch.inference_mode()
@pytest.mark.parametrize(
    ("weights", "tolerance"), [("int8", 0.05), ("int4", 0.3), pytest.param("q4", 0.3, marks=NO_Q4)]
)
def test_int_weights_compute_nearly_the_dense_logits(weights, tolerance):
    """The same model in fewer bits: logits within what the format's rounding allows, not another model."""
    dense, quantized = tiny_packed("llama", torch.bfloat16), tiny_packed("llama", torch.bfloat16, weights=weights)
    ids = torch.tensor(random_ids(seed=5, n=40))
    rows = [model.forward(ids, 0, model.new_cache(64), 64).float() for model in (dense, quantized)]
    spread = rows[0].abs().max()
    assert 0 < (rows[0] - rows[1]).abs().max() <= tolerance * spread


@torch.inference_mode()
@pytest.mark.parametrize("held_as", [int4_weight, pytest.param(q4_weight, marks=NO_Q4)])
def test_int4_holds_q4_1_weights_exactly(held_as):
    """Weights on Q4_1's grid (an offset and a step per 32 inputs, 16 levels) come back exactly: the
    bundled GGUF's layers are such weights, so in int4 and q4 they are the shipped model's, not a rounding."""
    torch.manual_seed(0)
    step = 2.0 ** torch.randint(-8, -4, (32, 2, 1)).float()  # powers of two: exact in bf16, as the kernel keeps them
    offset = torch.randint(-64, 0, (32, 2, 1)).float() * step
    levels = torch.randint(0, 16, (32, 2, 32)).float()
    levels[..., 0], levels[..., 1] = 0, 15  # each group spans its whole range, as a Q4_1 quantizer makes it
    weight = (offset + levels * step).view(32, 64).to(torch.bfloat16)
    held = held_as(weight)(torch.eye(64, dtype=torch.bfloat16))  # (inputs, outputs): the weights read back
    assert torch.equal(held.t(), weight)


def test_int_formats_are_refused_where_their_kernels_cannot_run():
    assert "bfloat16 activations" in format_refusal("int4", torch.float32, torch.device("cpu"))
    assert "CPU only" in format_refusal("int8", torch.bfloat16, torch.device("cuda"))
    assert format_refusal("int4", torch.bfloat16, torch.device("cpu")) is None
    assert "not 'int3'" in format_refusal("int3", torch.bfloat16, torch.device("cpu"))
    with pytest.raises(ValueError, match="int4 wants inputs in 32s"):
        int4_weight(torch.zeros(32, 48, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="cannot pack this model.*bfloat16 activations"):
        tiny_packed("llama", torch.float32, weights="int8")


def test_sliding_window_rolls_back_on_the_packed_forward():
    model = tiny_packed("mistral", torch.float32, seed=2, sliding_window=8)
    prompt = random_ids(seed=11, n=20)
    greedy = greedy_generate(model, prompt, 40, steps=STEPS).tokens
    assert hostile_mismatches(model, prompt, greedy, STEPS, seed=4, policies=[FixedCopyPolicy(1, 15)]) == []


@pytest.mark.slow
def test_bundled_model_is_packed_and_its_packed_llma_equals_its_packed_greedy(bundled):
    """The configuration `make run` uses: the bundled model packed, 8-wide steps, in its dtype (fp32 here)."""
    model, tokenizer = bundled
    packed = pack_model(model)
    assert packed.packing.forward == "packed"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "How do I reset my password?"}], add_generation_prompt=True, tokenize=True,
        return_dict=True,
    )["input_ids"]
    steps = StepConfig(8, cache_len=256)
    greedy = greedy_generate(packed, prompt, 48, tokenizer.eos_token_id, steps=steps).tokens
    plain = greedy_generate(model, prompt, 48, tokenizer.eos_token_id).tokens
    assert greedy[:12] == plain[:12]  # the same model: the reply starts alike (near-ties may split it later)
    changed = [t if i % 5 else t + 1 for i, t in enumerate(greedy)]
    for references in ([greedy], [changed], [prompt], []):
        out = llma_generate(packed, prompt, references, FixedCopyPolicy(1, 15), LlmaOptions(48, tokenizer.eos_token_id),
                            steps=steps)
        assert out.tokens == greedy


def test_unsupported_models_keep_transformers_forward():
    gemma = make_tiny_model("gemma", torch.float32)
    assert "gemma" in packing_refusal(gemma)
    assert pack_model(gemma) is gemma
    assert choose_step_width(gemma) is None  # fp32 on transformers' forward: one-token steps
    with pytest.raises(ValueError, match="cannot pack"):
        PackedLlama(gemma)
    half = make_tiny_model("llama", torch.float16)
    assert "float16" in packing_refusal(half)


@pytest.mark.parametrize("weights", ["dense", *INT_FORMATS])
def test_the_decoder_layers_run_under_torchscript(weights):
    """Eager Python is only the fallback for a torch without TorchScript: here the layers must be scripted, the
    prompts' (in their own format where it is not the steps', packing.prompt_weights) as the steps'."""
    packed = tiny_packed("qwen2", torch.bfloat16, weights=weights)
    assert isinstance(packed.decode_part.layers, torch.jit.ScriptModule)
    assert isinstance(packed.prompt_part.layers, torch.jit.ScriptModule)
    assert (packed.prompt_part is packed.decode_part) == (prompt_weights(weights, torch.bfloat16) == weights)


# Lanes of a shared forward as (rows, cache length, first position): 1..8 rows, each over its own key count (64 to
# 256), one cache shorter than another lane's keys (zeros pad its keys in the batch).
MIXED_LANES = [(1, 128, 70), (8, 256, 200), (3, 128, 5), (5, 256, 130)]
SAME_KEYS = [(1, 256, 200), (8, 256, 192), (3, 256, 250)]  # every lane over 256 keys


def lanes_over_random_caches(model: PackedLlama, specs: list[tuple[int, int, int]], seed: int = 3) -> list[Lane]:
    """Lanes (rows, cache length, first position) over caches holding random keys and values before each first
    position; the same for a seed whichever packing makes them."""
    generator = torch.Generator().manual_seed(seed)
    lanes = []
    for rows, cache_len, start in specs:
        cache = model.new_cache(cache_len)
        for entries in (*cache.keys, *cache.values):
            entries[:, :, :start] = torch.randn(entries[:, :, :start].shape, generator=generator).to(entries.dtype)
        ids = torch.randint(0, VOCAB, (rows,), generator=generator)
        lanes.append(Lane(ids, start, cache, StepConfig(8, cache_len).key_len(start)))
    return lanes


@torch.inference_mode()
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("arch", "overrides"), [("llama", {}), ("mistral", {"sliding_window": 8}), ("qwen2", {})])
def test_batched_attention_gives_every_row_its_lane_by_lane_bits(arch, overrides, dtype):
    """The CUDA path (one SDPA call for every lane, BatchedDecoderLayers) forced on the CPU. A lane alone, a batch of
    one, gets lane-by-lane SDPA's bits; in company, over as many keys, too. Over other key counts its padded keys
    are masked: the CUDA kernel adds exact zeros for them (its key tiles run in order, the start-up probe checks
    it there), the CPU's SDPA sums otherwise by the key count (StepConfig.key_granule), so here only nearly."""
    source = make_tiny_model(arch, DTYPES[dtype], seed=2, **overrides)
    lane_by_lane = PackedLlama(source, lane_kernel=False, batched_attention=False, prefix_cache_bytes=0)
    batched = PackedLlama(source, lane_kernel=False, batched_attention=True, prefix_cache_bytes=0)
    assert (batched.packing.attention, lane_by_lane.packing.attention) == ("batched", "sdpa")
    for specs in (MIXED_LANES, SAME_KEYS):
        expected = [lane_by_lane.forward_lanes([lane])[0] for lane in lanes_over_random_caches(lane_by_lane, specs)]
        alone = [batched.forward_lanes([lane])[0] for lane in lanes_over_random_caches(batched, specs)]
        together = batched.forward_lanes(lanes_over_random_caches(batched, specs))
        assert [torch.equal(a, b) for a, b in zip(alone, expected, strict=True)] == [True] * len(specs)
        if specs is SAME_KEYS:
            assert [torch.equal(a, b) for a, b in zip(together, expected, strict=True)] == [True] * len(specs)
        tolerance = 0.05 if dtype == "bf16" else 1e-5
        for a, b in zip(together, expected, strict=True):
            torch.testing.assert_close(a, b, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_attention_llma_equals_its_greedy_and_lane_by_lane_greedy(dtype):
    source = make_tiny_model("mistral", DTYPES[dtype], seed=4, sliding_window=8)
    batched = PackedLlama(source, lane_kernel=False, batched_attention=True)
    prompt = random_ids(seed=4, n=70)
    for steps in (STEPS, replace(STEPS, padded=False)):
        greedy = greedy_generate(batched, prompt, 40, steps=steps).tokens
        lane_by_lane = PackedLlama(source, lane_kernel=False, batched_attention=False)
        assert greedy_generate(lane_by_lane, prompt, 40, steps=steps).tokens == greedy
        assert hostile_mismatches(batched, prompt, greedy, steps, seed=4) == []


def test_a_block_past_the_packed_cache_or_across_a_granule_is_refused():
    model = tiny_packed("llama", torch.float32)
    runner = open_runner(model, StepConfig(8, cache_len=32, key_granule=16))
    runner.prefill(list(range(12)))
    with pytest.raises(ValueError, match="crosses a key granule"):
        runner.step([1] * 5)  # positions 12..16
    for _ in range(13):  # the last of these fills positions 24..31
        runner.step([1])
    with pytest.raises(ValueError, match="do not fit"):
        runner.step([1])  # position 25: its padding would need position 32


def widths_measured_as(seconds: dict[int, float], calls: list[int]):
    """A stand-in for `measure_cost_curve` that answers `seconds[W]` for a W-wide forward and logs each W."""
    def measure(model, *, steps: StepConfig, **options) -> CostCurve:
        calls.append(steps.width)
        return CostCurve((steps.width,), (seconds[steps.width],), step_width=steps.width)

    return measure


@pytest.mark.parametrize(
    ("seconds", "chosen"),
    [
        pytest.param({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}, 16, id="all-flat-widest"),
        pytest.param({1: 1.0, 2: 1.0, 4: 1.05, 8: FLAT_TOLERANCE, 16: FLAT_TOLERANCE * 1.01}, 8,
                     id="bound-is-inclusive"),
        pytest.param({1: 1.0, 2: 1.03, 4: 1.06, 8: 1.2, 16: 1.38}, 8, id="measured-epyc-bf16"),
        pytest.param({1: 1.0, 2: 1.18, 4: 1.46, 8: 2.34, 16: 4.0}, 2, id="measured-xeon-int4"),
        pytest.param({1: 1.0, 2: 1.5, 4: 2.0, 8: 3.0, 16: 5.0}, 2, id="none-flat-narrowest"),
        pytest.param({1: 2.0, 2: 2.1, 4: 2.2, 8: 2.35, 16: 2.6}, 8, id="relative-to-one-token"),
    ],
)
def test_the_chosen_step_width_is_the_widest_within_the_flat_bound(monkeypatch, seconds, chosen):
    """The rule of choose_step_width on constructed costs: no timing, so a wrong pick always fails."""
    calls: list[int] = []
    monkeypatch.setattr(cost_model, "measure_cost_curve", widths_measured_as(seconds, calls))
    monkeypatch.setattr(cost_model, "short_blocks_keep_their_bits", lambda model, width: False)  # padded steps
    assert choose_step_width(tiny_packed("llama", torch.bfloat16)) == chosen
    assert sorted(calls) == [1, *sorted(STEP_WIDTHS)]  # each width and the one-token forward measured once


@pytest.mark.parametrize(("flat", "unpadded", "chosen"), [(2, True, UNPADDED_WIDTH), (2, False, 2), (16, True, 16)])
def test_where_short_blocks_run_unpadded_steps_are_wide_enough_for_drafts(monkeypatch, flat, unpadded, chosen):
    """Unpadded, a step costs only its block's rows: the width only caps a draft, so it is at least UNPADDED_WIDTH
    however dear wide forwards are; padded, the flat rule alone."""
    seconds = {w: 1.0 if w <= flat else 3.0 for w in (1, *STEP_WIDTHS)}
    monkeypatch.setattr(cost_model, "measure_cost_curve", widths_measured_as(seconds, []))
    probed: list[int] = []
    monkeypatch.setattr(cost_model, "short_blocks_keep_their_bits",
                        lambda model, width: probed.append(width) or unpadded)
    assert choose_step_width(tiny_packed("llama", torch.bfloat16)) == chosen
    assert probed == ([UNPADDED_WIDTH] if flat < UNPADDED_WIDTH else [])


def test_the_step_width_is_measured_once_per_machine_and_kept(tmp_path, monkeypatch):
    model = tiny_packed("llama", torch.bfloat16)
    curves = tmp_path / "cost_curves.json"
    real_measure, measured = cost_model.measure_cost_curve, {}

    def measure_and_record(*args, **kwargs) -> CostCurve:
        curve = real_measure(*args, **kwargs)
        measured[curve.step_width] = curve.seconds[0]
        return curve

    monkeypatch.setattr(cost_model, "measure_cost_curve", measure_and_record)
    monkeypatch.setattr(cost_model, "short_blocks_keep_their_bits", lambda model, width: False)  # the flat rule alone
    width = choose_step_width(model, curves)
    # The pick agrees with what it measured: the widest within FLAT_TOLERANCE of one token, else the narrowest.
    flat = [w for w in STEP_WIDTHS if measured[w] <= FLAT_TOLERANCE * measured[1]]
    assert width == max(flat, default=min(STEP_WIDTHS)), (width, measured)

    def measure_again(*args, **kwargs):
        raise AssertionError("the step width was measured again instead of read from the curves file")

    monkeypatch.setattr(cost_model, "measure_cost_curve", measure_again)
    stored = json.loads(curves.read_text())
    (key,) = [k for k in stored if k.endswith("|step-width")]
    assert stored[key] == width
    stored[key] = 16 if width != 16 else 8  # what an earlier start chose stays chosen
    curves.write_text(json.dumps(stored))
    assert choose_step_width(model, curves) == stored[key]
    # An "auto" engine on the same model reads the kept width too (other settings: tests/decoding/test_engine.py).
    engine = build_engine(model.source, None, "tiny", AUTO, choose_width=lambda m: choose_step_width(m, curves))
    assert engine.step_width == stored[key]


def test_the_chosen_weight_format_is_the_one_whose_chosen_step_costs_least(monkeypatch):
    """choose_weights on constructed costs, by format: each format at its own widest flat width, plus its share
    of a full shared forward, then the cheapest. The step costs are the Intel Xeon's without AMX
    (docs/benchmark), so int4 at W=2 wins over dense at W=4 although int4's own curve is steeper."""
    seconds = {
        "dense": {1: 24.6, 2: 26.5, 4: 29.2, 8: 38.0, 16: 60.0},
        "int8": {1: 17.7, 2: 19.7, 4: 22.9, 8: 39.1, 16: 70.0},
        "int4": {1: 12.8, 2: 15.1, 4: 18.7, 8: 30.1, 16: 55.0},
        "q4": {1: 40.0, 2: 40.0, 4: 40.0, 8: 40.0, 16: 40.0},  # flat but dear alone
    }
    widths = {}

    def measure(model, *, steps: StepConfig, **options) -> CostCurve:
        widths.setdefault(model.weights, set()).add(steps.width)
        return CostCurve((steps.width,), (seconds[model.weights][steps.width],), step_width=steps.width)

    company = {"dense": 0.0, "int8": 0.0, "int4": 0.0, "q4": 8 * 30.0}  # a full shared forward's seconds

    monkeypatch.setattr(cost_model, "measure_cost_curve", measure)
    monkeypatch.setattr(cost_model, "measure_company", lambda model, lanes, rows: company[model.weights])
    model = make_tiny_model("llama", torch.bfloat16)
    assert choose_weights(model) == "int4"
    assert set(widths) == {"dense", "int8", "int4"} | ({"q4"} if q4_refusal() is None else set())
    seconds["int4"] = {w: 3 * s for w, s in seconds["int4"].items()}
    assert choose_weights(model) == "int8"  # int8 at W=2 (19.7) now beats int4 at W=2 (45.3) and dense at W=4
    seconds["int8"] = {w: 3 * s for w, s in seconds["int8"].items()}
    assert choose_weights(model) == "dense"
    company["dense"] = 8 * 40.0  # a busy helpdesk's forward weighs in: dense 29.2 + 40.0 against int4's 45.3
    assert choose_weights(model) == "int4"
    if q4_refusal() is None:  # 40.0 alone at its widest flat width, 16, plus its share of a full forward
        company["q4"] = 8 * 2.0
        assert choose_weights(model) == "q4"
    assert choose_weights(make_tiny_model("llama", torch.float32)) == "dense"  # nothing else runs in float32


@pytest.mark.parametrize("weights", INT_FORMATS)
def test_int_formats_prefill_dense_and_their_old_packing_prefills_in_its_own_format(weights):
    model = make_tiny_model("llama", torch.bfloat16, seed=4)
    ids = torch.tensor(random_ids(seed=5, n=40))

    def prefilled(packed: PackedLlama) -> tuple[torch.Tensor, torch.Tensor]:
        cache = packed.new_cache(128)
        return packed.prefill(ids, 0, cache, 64, chunked=False), cache.keys[-1][:, :, :40].clone()

    # the old packing as its replies were made: prompts in its own format, through SDPA
    dense = PackedLlama(model)
    own = PackedLlama(model, weights=weights, prefill_weights=weights, prefill_attention="sdpa")
    # dense where bf16 products are native; q4 steps prefill in q4 where they are emulated (packing.prompt_weights)
    assert PackedLlama(model, weights=weights).prefill_weights == prompt_weights(weights, torch.bfloat16)
    new = PackedLlama(model, weights=weights, prefill_weights="dense")
    assert own.prefill_weights == weights
    assert all(torch.equal(a, b) for a, b in zip(prefilled(new), prefilled(dense), strict=True))
    cache = own.new_cache(128)
    assert own.prompt_part is own.decode_part  # one stack of layers, attending by SDPA for prompts
    in_own_format = own._run(own.decode_part, "sdpa", [Lane(ids, 0, cache, 64)], last_only=True)[0]
    assert torch.equal(prefilled(own)[0], in_own_format)
    assert not torch.equal(prefilled(own)[1], prefilled(dense)[1])  # the formats' keys differ: Verify must know


def prefill_chunked(
    packed: PackedLlama, prompt: list[int], cache_len: int, prefill_break: int = 0
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The last token's logits, every prompt key of every layer, and how many prompt tokens were reused."""
    runner = PackedRunner(packed, StepConfig(4, cache_len, prefill_chunk=64, prefill_break=prefill_break))
    logits = runner.prefill(prompt)
    keys = torch.stack([layer[0, :, : len(prompt)] for layer in runner.cache.keys + runner.cache.values])
    return logits, keys, runner.reused


@pytest.mark.parametrize("weights", ["dense", *INT_FORMATS])
@pytest.mark.parametrize(
    ("arch", "overrides"), [("llama", {}), ("mistral", {"sliding_window": 8}), ("qwen2", {})]
)
def test_a_prompt_prefilled_from_cached_chunks_has_the_bits_of_one_computed_whole(arch, overrides, weights):
    """Whatever the prefix cache holds, and whatever cache size a reply preallocates: the same prompt keys."""
    model = make_tiny_model(arch, torch.bfloat16, seed=6, **overrides)
    prompt, other = random_ids(seed=7, n=150), random_ids(seed=8, n=150)
    shared_start = prompt[:100] + other[100:]  # the same first chunk as `prompt`, then its own tokens
    changed_first = [prompt[0] + 1, *prompt[1:]]  # every token after the first the same: reuses nothing
    cold = {tuple(p): prefill_chunked(PackedLlama(model, weights=weights), p, 256) for p in [prompt, shared_start]}
    warm = PackedLlama(model, weights=weights)
    assert prefill_chunked(warm, prompt, 512)[2] == 0
    for p, cache_len, reused in [(prompt, 256, 128), (shared_start, 1024, 64), (changed_first, 256, 0),
                                 (shared_start, 256, 128), (prompt, 1024, 128)]:
        logits, keys, got = prefill_chunked(warm, p, cache_len)
        assert got == reused, (p[:3], cache_len)
        if tuple(p) in cold:
            assert torch.equal(logits, cold[tuple(p)][0]) and torch.equal(keys, cold[tuple(p)][1])
    assert warm.prefixes.stats.reused_tokens == 448


@NO_Q4
def test_a_q4_prefill_from_cached_chunks_has_the_bits_of_one_computed_whole():
    """Prompts prefill in q4 where bf16 products are emulated (AVX2): its chunks, taken from the prefix cache, hold
    the bits they were computed with."""
    model = make_tiny_model("llama", torch.bfloat16, seed=6)
    prompt = random_ids(seed=7, n=150)
    cold = prefill_chunked(PackedLlama(model, weights="q4", prefill_weights="q4"), prompt, 256)
    warm = PackedLlama(model, weights="q4", prefill_weights="q4")
    assert prefill_chunked(warm, prompt, 512)[2] == 0
    logits, keys, reused = prefill_chunked(warm, prompt, 1024)
    assert reused == 128 and torch.equal(logits, cold[0]) and torch.equal(keys, cold[1])
    dense = prefill_chunked(PackedLlama(model, weights="q4", prefill_weights="dense"), prompt, 256)
    assert not torch.equal(keys, dense[1])  # the formats' keys differ: the recipe records which one ran


def test_chunks_break_where_the_beginning_ends_and_its_last_chunk_is_kept():
    steps = StepConfig(4, 512, prefill_chunk=64, prefill_break=100)
    assert steps.prefill_chunks(230) == [(0, 64), (64, 100), (100, 164), (164, 228), (228, 230)]
    assert [steps.kept_chunk(*c) for c in steps.prefill_chunks(230)] == [True, True, True, True, False]
    assert steps.prefill_chunks(100) == StepConfig(4, 512, prefill_chunk=64).prefill_chunks(100)
    assert StepConfig(4, 512, prefill_break=100).prefill_chunks(230) == [(0, 230)]  # no chunks: nothing to break
    with pytest.raises(ValueError):
        StepConfig(4, 512, prefill_chunk=64, prefill_break=-1)


@pytest.mark.parametrize("weights", ["dense", pytest.param("q4", marks=NO_Q4)])
def test_a_beginning_prefilled_alone_serves_every_question_after_it_with_the_same_bits(weights):
    """The warm-up prefills a beginning of 100 tokens with the break at its end: a prompt that starts with it and
    breaks there takes all 100 tokens from the prefix cache, and gets the bits of a prefill that computed them."""
    model = make_tiny_model("llama", torch.bfloat16, seed=6)
    beginning = random_ids(seed=7, n=100)
    prompts = [beginning + random_ids(seed=seed, n=150) for seed in (8, 9)]  # 100-164 and 164-228 after the break
    cold = [prefill_chunked(PackedLlama(model, weights=weights), p, 256, prefill_break=100) for p in prompts]
    unbroken = prefill_chunked(PackedLlama(model, weights=weights), prompts[0], 256)
    warm = PackedLlama(model, weights=weights)
    assert prefill_chunked(warm, beginning, 256, prefill_break=100)[2] == 0
    assert len(warm.prefixes) == 2  # the full chunk and the beginning's last one
    for prompt, (logits, keys, _) in zip(prompts, cold, strict=True):
        got_logits, got_keys, reused = prefill_chunked(warm, prompt, 512, prefill_break=100)
        assert reused == 100 and torch.equal(got_logits, logits) and torch.equal(got_keys, keys)
    # Asked again in another cache size: the chunks after the break come from the cache too (100-164, 164-228).
    again = prefill_chunked(warm, prompts[0], 1024, prefill_break=100)
    assert again[2] == 228 and torch.equal(again[0], cold[0][0]) and torch.equal(again[1], cold[0][1])
    # Without the break the same prompt is other chunks: through the same cache it shares the full first one
    # only, and gets the bits of its own prefill computed whole.
    logits, keys, reused = prefill_chunked(warm, prompts[0], 256)
    assert reused == 64 and torch.equal(logits, unbroken[0]) and torch.equal(keys, unbroken[1])


def test_the_prefix_cache_keeps_the_most_recent_chunks_within_its_bytes():
    chunk = torch.zeros(2, 3, 1, 64, 8, dtype=torch.bfloat16)  # 6 KiB
    size = chunk.numel() * chunk.element_size()
    cache = PrefixCache(max_bytes=3 * size)
    keys = [PrefixCache.next_key(PrefixCache.first_key(64), [i]) for i in range(5)]
    for key in keys[:3]:
        cache.put(key, chunk)
    assert cache.get(keys[0]) is chunk  # now the most recently used
    cache.put(keys[3], chunk)
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is chunk and len(cache) == 3
    assert cache.bytes_held == 3 * size
    PrefixCache(max_bytes=0).put(keys[4], chunk)  # a cache of no bytes keeps nothing, and says nothing
    assert PrefixCache.next_key(keys[0], [1, 2]) != PrefixCache.next_key(keys[0], [258])  # tokens, not bytes, joined
    with pytest.raises(ValueError):
        StepConfig(4, 256, prefill_chunk=48)  # chunks end at key granules
