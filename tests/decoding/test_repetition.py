"""Repetition control: what the rule bans, penalizes and stops; and LLMA equals the rule decoded a token at a time."""

import json
import math
import random
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoding import (
    ONE_TOKEN_STEPS,
    OUTPUT_SOURCE,
    PROMPT_SOURCE,
    REPETITION_OFF,
    AdaptiveCopyPolicy,
    CostCurve,
    DecodeResult,
    FixedCopyPolicy,
    LlmaOptions,
    RepetitionRule,
    greedy_generate,
    llma_generate,
    llma_stream,
)
from decoding.engine import pack_model
from decoding.greedy import greedy_stream
from decoding.lane_kernel import lane_kernel_refusal
from decoding.repetition import (
    MAX_PENALTY,
    RECOMMENDED_REPETITION_RULE,
    longest_repeat,
    repeat_lengths,
)
from decoding.simulate import simulate_llma
from decoding.steps import sized_steps
from decoding.verifier import first_argmax

from .invariance import make_tiny_model

CURVE = CostCurve(sizes=(1, 2, 4, 8, 16), seconds=(0.110, 0.170, 0.180, 0.200, 0.220))
POLICIES = [FixedCopyPolicy(1, 15), FixedCopyPolicy(2, 3), AdaptiveCopyPolicy(cost=CURVE)]
# Digits 0-9 as tokens 10-19, "." and "," as 20 and 21, a line break as 22: the tiny models' number tokens.
TINY_NUMBER_CHARS = tuple((10 + d, str(d)) for d in range(10)) + ((20, "."), (21, ","))
NUMBERS = RepetitionRule(ground_numbers=True, number_chars=TINY_NUMBER_CHARS, line_break_ids=(22,))
DIGITS = {token for token, char in TINY_NUMBER_CHARS if char.isdigit()}
# Settings strong enough to change the tiny random models' replies (their logits are far apart), and stop
# rules short enough to fire within a few dozen tokens.
RULES = {
    "ban2": RepetitionRule(no_repeat_ngram=2),
    "ban3+stop4": RepetitionRule(no_repeat_ngram=3, stop_ngram=4),
    "dry": RepetitionRule(dry_multiplier=2.0, dry_allowed_length=1),
    "dry+stop3": RepetitionRule(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2, stop_ngram=3),
    "stop3": RepetitionRule(stop_ngram=3),
    "end": RepetitionRule(end_after=4, end_bonus=1.0, eos_token_id=2),
    "dry+end": RepetitionRule(dry_multiplier=1.0, dry_allowed_length=1, end_after=8, end_bonus=0.5, eos_token_id=2),
    "recommended": RECOMMENDED_REPETITION_RULE.for_tokenizer(2),
    "numbers": NUMBERS,
    "dry+numbers": replace(NUMBERS, dry_multiplier=1.0, dry_allowed_length=1),
}
small_tokens = st.lists(st.integers(0, 5), max_size=40)  # a small alphabet: many repeats
# Derandomized: in fp32, one-token steps and a verification's rows may round a near-tie apart (2e-6 measured on
# conftest's tiny model), the known limit of variable-width steps; fixed examples keep this suite from finding one.
fast = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- the rule itself ------------------------------------------------------------------------------


def occurs(pattern: list[int], seq: list[int]) -> bool:
    """Whether `pattern` occurs in `seq`, contiguously."""
    return any(seq[i : i + len(pattern)] == pattern for i in range(len(seq) - len(pattern) + 1))


def brute_repeat_lengths(reply: list[int], cap: int) -> dict[int, int]:
    """For each token c: the longest m <= cap such that reply[-m:] + [c] occurs in reply."""
    lengths = {}
    for c in set(reply):
        found = [m for m in range(1, min(cap, len(reply) - 1) + 1) if occurs(reply[-m:] + [c], reply)]
        if found:
            lengths[c] = max(found)
    return lengths


def brute_longest_repeat(reply: list[int]) -> int:
    """The longest suffix of `reply` that also occurs ending at an earlier position."""
    return max([m for m in range(1, len(reply)) if occurs(reply[-m:], reply[:-1])], default=0)


@settings(max_examples=300, deadline=None)
@given(reply=small_tokens, cap=st.integers(1, 70))
def test_repeat_lengths_match_the_definition(reply, cap):
    assert repeat_lengths(reply, cap) == brute_repeat_lengths(reply, cap)
    assert longest_repeat(reply, 100) == brute_longest_repeat(reply)


@settings(max_examples=300, deadline=None)
@given(reply=small_tokens, n=st.integers(2, 6))
def test_no_repeat_ban_bans_exactly_the_tokens_that_complete_an_ngram_of_the_reply(reply, n):
    tail = reply[len(reply) - (n - 1) :] if len(reply) >= n - 1 else None
    expected = {reply[i + n - 1] for i in range(len(reply) - n + 1) if reply[i : i + n - 1] == tail}
    penalties = RepetitionRule(no_repeat_ngram=n).penalties(reply)
    assert penalties == {token: math.inf for token in expected}


def test_no_repeat_ban_example():
    reply = [1, 2, 3, 9, 1, 2, 4, 7, 1, 2]
    assert set(RepetitionRule(no_repeat_ngram=3).penalties(reply)) == {3, 4}  # "1 2 3" and "1 2 4" exist
    assert set(RepetitionRule(no_repeat_ngram=4).penalties(reply)) == set()  # "7 1 2" never occurred before
    assert set(RepetitionRule(no_repeat_ngram=2).penalties([5, 6, 5])) == {6}
    logits = torch.tensor([0.0, 0.0, 0.0, 5.0, 4.0, 3.0])
    assert RepetitionRule(no_repeat_ngram=3).choose(logits, reply) == 5  # 3 and 4 banned: the next best


def test_dry_penalty_grows_with_the_repeated_length_and_needs_the_allowed_length():
    rule = RepetitionRule(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)
    earlier = [10, 11, 12, 13, 14, 15, 16]
    penalties = []
    for length in range(1, 7):
        reply = [*earlier, 99, *earlier[:length]]  # the reply's last `length` tokens occurred, then earlier[length]
        penalties.append(rule.penalties(reply).get(earlier[length], 0.0))
    assert penalties[0] == 0.0  # a repeat of one token is allowed
    assert penalties[1:] == pytest.approx([0.8 * 1.75**k for k in range(5)])
    assert penalties[1:] == sorted(penalties[1:]) and penalties[-1] > penalties[1]


def test_dry_penalty_is_applied_in_float32_and_can_change_the_choice():
    rule = RepetitionRule(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2)
    reply = [7, 8, 9, 3, 7, 8]  # "7 8" was followed by 9: 9 loses 1.0 * 2 ** 0
    logits = torch.tensor([0.0] * 9 + [1.5, 1.0], dtype=torch.bfloat16)
    assert rule.penalties(reply) == {9: 1.0}
    assert rule.choose(logits, reply) == 10  # 1.5 - 1.0 < 1.0
    assert rule.choose(logits, reply[:-1]) == 9  # "7" alone is under the allowed length
    expected = (logits.float() - torch.nn.functional.one_hot(torch.tensor(9), 11).float()).argmax()
    assert rule.choose(logits, reply) == int(expected)


def test_the_end_bonus_lifts_eos_by_the_tokens_past_end_after_and_needs_the_eos_id():
    rule = RepetitionRule(end_after=3, end_bonus=0.5, eos_token_id=7)
    assert rule.penalties([1, 2, 3]) == {} and rule.penalties([1, 2, 3, 4, 5]) == {7: -1.0}
    assert not RepetitionRule(end_after=3, end_bonus=0.5).changes_choice  # no EOS known: nothing to lift
    assert RepetitionRule(end_bonus=0.5).for_tokenizer(7).eos_token_id == 7
    assert RepetitionRule().for_tokenizer(7) == RepetitionRule()  # no bonus: the rule stays as stored before
    logits = torch.zeros(10)
    logits[4], logits[7] = 1.0, 0.2
    assert rule.choose(logits, [1, 2, 3, 4]) == 4 and rule.choose(logits, [1, 2, 3, 4, 5, 6]) == 7


def test_a_grounded_reply_states_only_numbers_of_its_prompt():
    prompt = [5, 11, 12, 20, 15, 10, 6]  # "... 12.50 ..."
    grounded = NUMBERS.numbers_in(prompt)
    assert grounded == {"1", "12", "12.", "12.5", "12.50"}
    assert set(NUMBERS.ungrounded_digits([5, 6], grounded)) == DIGITS - {11}  # a new number begins as one of them
    assert set(NUMBERS.ungrounded_digits([5, 11, 12, 20], grounded)) == DIGITS - {15}  # "12." goes on as "12.5"
    assert set(NUMBERS.ungrounded_digits([5, 11, 12, 20, 15, 10], grounded)) == DIGITS  # "12.50" is all it says
    assert set(NUMBERS.ungrounded_digits([5, 11, 12, 20, 6], grounded)) == DIGITS - {11}  # a full stop ends one
    # A number that starts the reply or a line is free: a list's "1.", "2.", "10."
    assert NUMBERS.ungrounded_digits([], grounded) == NUMBERS.ungrounded_digits([5, 22], grounded) == []
    assert NUMBERS.ungrounded_digits([5, 22, 17], grounded) == []
    logits = torch.zeros(30)
    logits[13], logits[11], logits[6] = 3.0, 2.0, 1.0
    assert NUMBERS.choose(logits, [5, 6], grounded) == 11  # "3" is in no number of the prompt; "1" is
    assert NUMBERS.choose(logits, [5, 11, 12, 20, 15, 10], grounded) == 6  # no digit makes "12.50" longer
    assert NUMBERS.choose(logits, [5, 6]) == 6 and REPETITION_OFF.choose(logits, [5, 6]) == 13  # nothing to state
    assert not replace(NUMBERS, number_chars=()).changes_choice  # no digit tokens known: nothing to ground
    assert RepetitionRule.from_json(json.loads(json.dumps(NUMBERS.to_json()))) == NUMBERS  # as stored with a reply


def test_the_bundled_tokenizer_has_digit_joiner_and_line_break_tokens():
    from transformers import AutoTokenizer

    from decoding.model_loading import DEFAULT_MODEL_DIR, prepare_bundled_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_bundled_model(DEFAULT_MODEL_DIR))
    rule = RECOMMENDED_REPETITION_RULE.for_tokenizer(tokenizer.eos_token_id, tokenizer)  # the app's rule
    assert sorted(char for _, char in rule.number_chars) == sorted("0123456789.,")
    assert tokenizer("\n")["input_ids"][0] in rule.line_break_ids
    prompt = tokenizer("Personal costs $8 per month or $80 per year.")["input_ids"]
    assert {"8", "80"} <= rule.numbers_in(prompt) and "9" not in rule.numbers_in(prompt)


def test_penalties_saturate_and_stay_finite():
    reply = [4] * 200  # the longest possible repeat
    penalty = RepetitionRule(dry_multiplier=5.0, dry_base=3.0).penalties(reply)[4]
    assert 1e20 < penalty <= MAX_PENALTY and torch.isfinite(torch.tensor(penalty, dtype=torch.float32))
    assert RepetitionRule(dry_multiplier=5.0, dry_base=3.0).choose(torch.zeros(8), reply) != 4


def test_the_rule_sees_the_reply_before_each_position_and_the_prompt_only_for_its_numbers(tiny_model):
    """Every choice is made from the reply before it: greedy step by step, and LLMA's rows reply + draft[:j]."""
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]  # a prompt full of repeats, which the rule must not look at
    spy = SpyRule()
    reply = greedy_generate(tiny_model, prompt, 30, repetition=spy).tokens
    assert spy.prefixes == [reply[:i] for i in range(len(reply))]
    assert spy.prompts == [prompt]  # read once, for the numbers a reply may state

    llma_spy = SpyRule()
    options = LlmaOptions(30, repetition=llma_spy)
    out = llma_generate(tiny_model, prompt, [reply], FixedCopyPolicy(1, 15), options)
    assert out.tokens == reply and out.forward_passes < len(reply)  # drafts were verified, several rows a forward
    # Each reply position was chosen after exactly the reply before it (a rejected draft's rows see its tokens).
    assert {tuple(reply[:i]) for i in range(len(reply))} <= {tuple(p) for p in llma_spy.prefixes}


class SpyRule:
    """A rule that records the reply each choice is made after, and chooses like plain greedy."""

    changes_choice, stop_ngram = True, 0

    def __init__(self) -> None:
        self.prefixes: list[list[int]] = []
        self.prompts: list[list[int]] = []

    def numbers_in(self, prompt) -> frozenset[str]:
        self.prompts.append(list(prompt))
        return frozenset()

    def adjusted(self, logits: torch.Tensor, reply, grounded=frozenset()) -> torch.Tensor:
        self.prefixes.append(list(reply))
        return logits

    def stops(self, reply) -> bool:
        return False


@settings(max_examples=200, deadline=None)
@given(tokens=small_tokens, n=st.integers(1, 6), cuts=st.lists(st.integers(1, 8), max_size=20),
       budget=st.integers(1, 45))
def test_stop_rule_fires_at_the_same_token_fed_one_by_one_or_in_chunks(tokens, n, cuts, budget):
    rule = RepetitionRule(stop_ngram=n)
    one_by_one = DecodeResult()
    for token in tokens:
        one_by_one.accept([token], budget, None, rule)
        one_by_one.drop_repeat()
    chunked, start = DecodeResult(), 0
    for size in [*cuts, len(tokens)]:
        chunked.accept(tokens[start : start + size], budget, None, rule)
        chunked.drop_repeat()
        start += size
    assert (chunked.tokens, chunked.stop_reason, chunked.repeat_start) == (
        one_by_one.tokens, one_by_one.stop_reason, one_by_one.repeat_start)
    fired = next((i for i in range(1, min(len(tokens), budget) + 1) if brute_longest_repeat(tokens[:i]) >= n), None)
    if fired is None:
        assert one_by_one.tokens == tokens[:budget] and one_by_one.stop_reason in (None, "limit")
    else:
        assert one_by_one.stop_reason == "repetition" and one_by_one.tokens == tokens[: fired - n]


def test_stop_rule_cuts_the_reply_where_its_repetition_began():
    opening, cycle = [1, 2, 3], [4, 5, 6, 7, 8, 9, 10]
    looping = opening + cycle * 4
    result = DecodeResult()
    kept = result.accept(looping, 100, None, RepetitionRule(stop_ngram=5))
    assert kept == len(opening) + len(cycle) + 5  # the fifth token of the second cycle completes a repeated 5-gram
    assert result.drop_repeat() == 5 and result.dropped_tokens == 5
    assert result.tokens == opening + cycle and result.stop_reason == "repetition" and result.done()
    assert result.drop_repeat() == 0  # once


def test_the_stop_rule_ends_a_tiny_models_loop_inside_an_accepted_draft(tiny_model):
    """The draft runs past the point where the stop rule fires; LLMA stops and cuts where one-token steps do."""
    rule = RULES["stop3"]
    prompt, reply = next(
        (prompt, reply)
        for prompt in (random_ids(seed, 12, vocab=64) for seed in range(20))
        for reply in [greedy_generate(tiny_model, prompt, 40, repetition=rule)]
        if reply.stop_reason == "repetition"
    )
    uncut = greedy_generate(tiny_model, prompt, 40).tokens  # the rule changes no choice: the loop goes on
    chunks = list(llma_stream(tiny_model, prompt, [uncut], FixedCopyPolicy(1, 15), LlmaOptions(40, repetition=rule)))
    result = chunks[-1].result
    assert (result.tokens, result.stop_reason) == (reply.tokens, "repetition")
    assert chunks[-1].dropped == 3 and 1 < len(chunks[-1].tokens) < chunks[-1].drafted + 1  # fired mid-draft
    assert sum(len(c.tokens) for c in chunks) - chunks[-1].dropped == len(result.tokens)
    for run in result.copied_runs:  # clipped to the reply
        source = {PROMPT_SOURCE: prompt, OUTPUT_SOURCE: result.tokens}.get(run.source) or uncut
        assert run.out_start + run.length <= len(result.tokens)
        copied = result.tokens[run.out_start : run.out_start + run.length]
        assert copied == source[run.ref_start : run.ref_start + run.length]


def test_json_round_trip_and_bad_settings():
    for rule in [*RULES.values(), REPETITION_OFF]:
        assert RepetitionRule.from_json(rule.to_json()) == rule
    assert RepetitionRule.from_json({}) == REPETITION_OFF
    for bad in [dict(no_repeat_ngram=1), dict(dry_base=1.0), dict(dry_multiplier=-1), dict(stop_ngram=-2),
                dict(dry_allowed_length=0)]:
        with pytest.raises(ValueError):
            RepetitionRule(**bad)
    with pytest.raises(ValueError, match="not repetition-rule settings"):
        RepetitionRule.from_json({"temperature": 0.7})


@torch.inference_mode()
def test_the_rule_off_is_todays_greedy_exactly(tiny_model):
    """Off: argmax of each step's logits; a rule that never applies goes through the per-row path and agrees."""
    prompt = random_ids(3, 10, vocab=64)
    ids = list(prompt)
    for _ in range(30):  # plain greedy from whole forwards, no cache
        ids.append(int(tiny_model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    expected = ids[len(prompt) :]
    assert greedy_generate(tiny_model, prompt, 30).tokens == expected
    assert greedy_generate(tiny_model, prompt, 30, repetition=REPETITION_OFF).stop_reason == "limit"
    never = RepetitionRule(dry_multiplier=1.0, dry_allowed_length=64)  # no 64-token repeat in 30 tokens
    assert never.changes_choice and greedy_generate(tiny_model, prompt, 30, repetition=never).tokens == expected
    assert llma_generate(tiny_model, prompt, [expected], POLICIES[0], LlmaOptions(30)).tokens == expected


# --- LLMA equals the rule decoded step by step --------------------------------------------------------


def random_ids(seed: int, n: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def hostile_references(model, prompt, reply, rule, budget, steps, vocab, seed) -> list[list[list[int]]]:
    """References that copy the reply's own loops, the rule's reply run past its stop, near misses, junk."""
    loops = greedy_generate(model, prompt, budget, steps=steps).tokens  # plain greedy: the loops the rule fights
    uncut = greedy_generate(model, prompt, budget, steps=steps, repetition=replace(rule, stop_ngram=0)).tokens
    changed = list(reply)
    rng = random.Random(seed)
    for i in rng.sample(range(len(changed)), min(3, len(changed))):
        changed[i] = (changed[i] + 1) % vocab
    tail = reply[len(reply) // 2 :]
    return [[reply], [loops], [uncut], [changed], [tail * 3], [random_ids(seed, 40, vocab)], [changed, loops, prompt]]


def mismatches(model, prompt, rule, budget, steps, vocab, seed, policies=POLICIES, eos=None):
    """(references, policy) wherever LLMA under `rule` differed from greedy under `rule`, tokens or stop reason."""
    greedy = greedy_generate(model, prompt, budget, eos, steps=steps, repetition=rule)
    options = LlmaOptions(budget, eos, repetition=rule)
    found = []
    for references in hostile_references(model, prompt, greedy.tokens, rule, budget, steps, vocab, seed):
        for policy in policies:
            out = llma_generate(model, prompt, references, policy, options, steps=steps)
            if (out.tokens, out.stop_reason) != (greedy.tokens, greedy.stop_reason):
                found.append((references, policy))
    return found


@fast
@given(prompt=st.lists(st.integers(0, 63), min_size=1, max_size=16), budget=st.integers(1, 40),
       seed=st.integers(0, 10**6), rule=st.sampled_from(list(RULES.values())), policy=st.sampled_from(POLICIES))
def test_llma_equals_the_rule_decoded_one_token_at_a_time_fp32(tiny_model, prompt, budget, seed, rule, policy):
    assert mismatches(tiny_model, prompt, rule, budget, ONE_TOKEN_STEPS, 64, seed, [policy]) == []


def test_the_tiny_cases_exercise_every_rule(tiny_model):
    """Not vacuous: on these prompts each rule changes plain greedy's reply, and the stop rules fire."""
    prompts = [random_ids(seed, 10, vocab=64) for seed in range(8)]
    plain = [greedy_generate(tiny_model, prompt, 40).tokens for prompt in prompts]
    for name, rule in RULES.items():
        changed = stopped = 0
        for prompt, plain_tokens in zip(prompts, plain, strict=True):
            ruled = greedy_generate(tiny_model, prompt, 40, repetition=rule)
            changed += ruled.tokens != plain_tokens
            stopped += ruled.stop_reason == "repetition"
        assert changed > 0 or not rule.changes_choice or name == "recommended", name  # tuned for real logits
        assert (stopped > 0) == (name in ("stop3", "dry+stop3")), name  # a 3-gram ban leaves no 4-gram to repeat


def test_eos_ends_the_reply_alike(tiny_model):
    prompt = random_ids(5, 9, vocab=64)
    for rule in RULES.values():
        free = greedy_generate(tiny_model, prompt, 40, repetition=rule).tokens
        eos = free[len(free) // 2]
        assert mismatches(tiny_model, prompt, rule, 40, ONE_TOKEN_STEPS, 64, seed=1, eos=eos) == []


WIDE_ARCHS = ["llama", "qwen3"]  # qwen3's bf16 rows are the ones that differ when the step width is not fixed
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", WIDE_ARCHS)
def test_llma_equals_the_rule_under_four_wide_steps(arch, dtype):
    model = make_tiny_model(arch, DTYPES[dtype], seed=1)
    prompt = random_ids(7, 12, vocab=160)
    steps = sized_steps(4, len(prompt), 60)
    for name in ("ban2", "dry+stop3", "stop3"):
        assert mismatches(model, prompt, RULES[name], 60, steps, 160, seed=3, policies=POLICIES[:2]) == [], name


@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_llma_equals_the_packed_rule(dtype):
    model = pack_model(make_tiny_model("llama", DTYPES[dtype], seed=1))
    assert type(model).__name__ == "PackedLlama"
    prompt = random_ids(8, 12, vocab=160)
    steps = sized_steps(4, len(prompt), 60)
    for name in ("dry", "ban3+stop4", "stop3"):
        assert mismatches(model, prompt, RULES[name], 60, steps, 160, seed=5, policies=POLICIES[:2]) == [], name


def test_streamed_chunks_and_replay_agree_under_a_rule(tiny_model):
    rule = RULES["dry+stop3"]
    prompt = random_ids(2, 10, vocab=64)
    reply = greedy_generate(tiny_model, prompt, 40, repetition=rule)
    options = LlmaOptions(40, repetition=rule)
    chunks = list(llma_stream(tiny_model, prompt, [reply.tokens], POLICIES[2], options))
    assert [t for c in chunks for t in c.tokens][: len(reply.tokens)] == reply.tokens
    assert chunks[-1].result.tokens == reply.tokens
    steps = list(greedy_stream(tiny_model, prompt, 40, repetition=rule))
    assert steps[-1].result.tokens == reply.tokens
    sim = simulate_llma(prompt, [reply.tokens], reply.tokens, POLICIES[2], CURVE, options)
    assert sim.result.tokens == reply.tokens


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_float_argmax_picks_what_torchs_own_argmax_picks_ties_and_nans_included(dtype):
    """first_argmax replaced torch's argmax on the logits themselves: replies made before must choose alike."""
    generator = torch.Generator().manual_seed(5)
    rows = torch.randn(64, 4096, generator=generator).to(dtype)
    for i, row in enumerate(rows):
        if i % 3 == 0:
            row[(i * 37) % 4096] = row.max()  # a tie with the largest, before or after it
        if i % 16 == 5:
            row[(i * 11) % 4096] = float("nan")
    assert first_argmax(rows) == rows.argmax(dim=-1).tolist()
    assert [first_argmax(row) for row in rows] == [int(row.argmax()) for row in rows]
    assert [REPETITION_OFF.choose(row, []) for row in rows] == [int(row.argmax()) for row in rows]
    # Rows the kernel's 16 lanes do not divide (the largest, or the first NaN, in the last few), every value
    # -inf, zeros of both signs, the largest last: the same index as torch's.
    odd = torch.randn(6, 4101, generator=generator).to(dtype)
    odd[0, 4100] = 100
    odd[1, 4099] = float("nan")
    odd[2] = float("-inf")
    odd[3] = 0.0
    odd[3, 3] = -0.0
    odd[4, 4095] = odd[4, 5] = 100
    odd[5, 4100] = float("inf")
    assert first_argmax(odd) == odd.argmax(dim=-1).tolist()
    assert first_argmax(odd[:, :4096]) == odd[:, :4096].argmax(dim=-1).tolist()
    assert first_argmax(odd[:, :7]) == odd[:, :7].argmax(dim=-1).tolist()  # no whole block of 16


@pytest.mark.skipif(lane_kernel_refusal() is not None, reason="the lane library is not built here")
def test_the_argmax_kernel_agrees_with_torch_on_rows_full_of_ties_and_is_what_first_argmax_returns():
    generator = torch.Generator().manual_seed(9)
    for dtype in (torch.bfloat16, torch.float32):
        rows = (torch.randn(32, 49152, generator=generator) * 3).round().to(dtype)  # rounded: many ties
        assert torch.ops.llma.first_argmax(rows) == rows.argmax(dim=-1).tolist() == first_argmax(rows)
