"""The reply-quality counts the benchmark reports (bench/quality_checks.py)."""

from bench.quality_checks import facts_in, judge, loops, supported


def test_a_repeated_twelve_token_run_is_a_loop_and_eleven_is_not():
    assert loops("", list(range(12)) + [99] + list(range(12)))
    assert not loops("", list(range(11)) + [99] + list(range(11)))


def test_a_line_three_times_is_a_loop_but_twice_or_list_markers_are_not():
    again = "Click the reset button again."
    looping = f"1. Open Settings.\n{again}\n{again}\n{again}"
    assert loops(looping, list(range(40)))
    assert not loops("Click the reset button again.\nClick the reset button again.\nDone now.", list(range(40)))
    assert not loops("1.\n1.\n1.\nYes.\nYes.\nYes.", list(range(40)))


def test_facts_are_numbers_prices_urls_and_emails_but_not_list_markers():
    text = "1. Go to nimbusdrive.com/plans.\n2. Personal is $8 a month, or write to help@nimbus.io.\nStep 3: 50 GB."
    assert facts_in(text) == ["nimbusdrive.com/plans", "$8", "help@nimbus.io", "50"]


def test_a_fact_is_supported_when_the_prompt_holds_it():
    prompt = "Plans\n\nPersonal costs $8 a month and holds 2 TB. Write to support@nimbusdrive.com."
    assert supported("$8", prompt) and supported("2", prompt) and supported("support@nimbusdrive.com", prompt)
    assert not supported("$1.10", prompt) and not supported("pro.nimbusdrive.com", prompt)
    quality = judge("It costs $1.10 per month, or $8.", list(range(9)), prompt, "eos")
    assert quality.facts == 2 and quality.unsupported == ("$1.10",) and not quality.loops
