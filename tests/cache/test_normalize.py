from hypothesis import given
from hypothesis import strategies as st

from cache import normalize_question


def test_trivial_variants_normalize_alike():
    assert normalize_question("  How do I RESET\tmy   password?? ") == "how do i reset my password"
    assert normalize_question("how do i reset my password.") == "how do i reset my password"


def test_inner_punctuation_and_symbols_are_kept():
    assert normalize_question("What's C++, really?") == "what's c++, really"


@given(st.text())
def test_normalizing_twice_changes_nothing(text):
    once = normalize_question(text)
    assert normalize_question(once) == once
