import pytest

from decoding import AdaptiveCopyPolicy, CostCurve, FixedCopyPolicy
from decoding.policy import best_copy_len
from decoding.reference_index import Match

# Shaped like the curve measured for SmolLM2-135M on 2 CPU threads (seconds by tokens per forward).
CPU_CURVE = CostCurve(sizes=(1, 2, 4, 8, 16, 32, 64), seconds=(0.110, 0.170, 0.180, 0.200, 0.220, 0.260, 0.420))


def test_cost_interpolates_and_extrapolates():
    assert CPU_CURVE.cost(1) == pytest.approx(0.110)
    assert CPU_CURVE.cost(3) == pytest.approx(0.175)
    assert CPU_CURVE.cost(128) == pytest.approx(0.420 + 64 * (0.160 / 32))
    assert CPU_CURVE.relative(1) == 1.0


def test_a_padded_step_costs_whole_forwards_and_an_unpadded_one_its_rows():
    padded = CostCurve(sizes=(4,), seconds=(0.03,), step_width=4)
    assert [padded.cost(n) for n in (1, 4, 5)] == pytest.approx([0.03, 0.03, 0.06])
    unpadded = CostCurve(sizes=(1, 2, 4), seconds=(0.01, 0.02, 0.03), step_width=4, padded=False)
    # 3 rows: between 2 and 4; 6 rows: one full forward and one of 2 rows
    assert [unpadded.cost(n) for n in (1, 3, 4, 6)] == pytest.approx([0.01, 0.025, 0.03, 0.05])
    assert CostCurve.from_json(unpadded.to_json()) == unpadded


def test_no_draft_when_acceptance_is_too_low_to_pay():
    # A one-token draft costs 1.55 steps; it must be accepted more than 55% of the time to pay.
    assert best_copy_len(0.3, CPU_CURVE, limit=48) == 0


def test_longer_drafts_when_acceptance_is_high():
    short = best_copy_len(0.7, CPU_CURVE, limit=48)
    long = best_copy_len(0.97, CPU_CURVE, limit=48)
    assert 0 < short < long


def test_draft_never_exceeds_the_limit():
    assert best_copy_len(0.99, CPU_CURVE, limit=5) == 5


def test_adaptive_drafter_backs_off_after_misses_and_grows_after_hits():
    drafter = AdaptiveCopyPolicy(cost=CPU_CURVE).start()
    match = Match(source=0, next_pos=3, match_len=3)
    first = drafter.copy_len(match, continuing=False, available=100)
    for _ in range(5):
        drafter.record(match, continuing=False, drafted=first, accepted=0)
    assert drafter.copy_len(match, continuing=False, available=100) < first
    streak = AdaptiveCopyPolicy(cost=CPU_CURVE).start()
    for _ in range(5):
        streak.record(match, continuing=True, drafted=16, accepted=16)
    assert streak.copy_len(match, continuing=True, available=100) > first


def test_a_long_agreeing_run_is_drafted_longer_than_a_fresh_one():
    drafter = AdaptiveCopyPolicy(cost=CPU_CURVE).start()
    match = Match(source=0, next_pos=3, match_len=4)
    fresh = drafter.copy_len(match, continuing=False, available=100)
    drafter.record(match, continuing=False, drafted=fresh, accepted=fresh)  # the run agreed so far
    after_one = drafter.copy_len(match, continuing=True, available=100)
    drafter.record(match, continuing=True, drafted=after_one, accepted=after_one)
    after_two = drafter.copy_len(match, continuing=True, available=100)
    assert fresh < after_one < after_two
    drafter.record(match, continuing=True, drafted=after_two, accepted=2)  # the run broke off
    assert drafter.run_len == 0
    blind = AdaptiveCopyPolicy(cost=CPU_CURVE, run_weight=0.0).start()
    blind.record(match, continuing=False, drafted=fresh, accepted=fresh)
    assert blind.copy_len(match, continuing=True, available=100) < after_one


def test_fixed_policy_follows_the_paper():
    drafter = FixedCopyPolicy(match_len=2, copy_len=7).start()
    assert drafter.copy_len(Match(0, 1, 1), continuing=False, available=100) == 0
    assert drafter.copy_len(Match(0, 1, 2), continuing=False, available=100) == 7
    assert drafter.copy_len(Match(0, 1, 2), continuing=False, available=3) == 3
    with pytest.raises(ValueError):
        FixedCopyPolicy(match_len=0)


def test_measured_cost_curve_is_positive_and_never_falls(tiny_model, tmp_path):
    from decoding import load_or_measure, measure_cost_curve

    curve = measure_cost_curve(tiny_model, sizes=(1, 4, 16), context_len=32, repeats=2)
    assert curve.sizes == (1, 4, 16) and all(s > 0 for s in curve.seconds)
    assert list(curve.seconds) == sorted(curve.seconds)
    stored = load_or_measure(tiny_model, tmp_path / "curves.json")
    assert load_or_measure(tiny_model, tmp_path / "curves.json") == stored  # read back, not re-measured
