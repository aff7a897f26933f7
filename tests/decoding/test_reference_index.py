import random

import pytest

from decoding.reference_index import OUTPUT_SOURCE, ReferenceIndex


def test_finds_longest_suffix_and_its_continuation():
    index = ReferenceIndex(max_match_len=4)
    index.add(0, [1, 2, 3, 4, 5])
    index.add(1, [9, 3, 4, 7])
    match = index.find([8, 2, 3, 4])
    assert (match.source, match.next_pos, match.match_len) == (0, 4, 3)
    assert index.continuation(match, 10) == [5]


def test_shorter_match_when_longest_is_absent():
    index = ReferenceIndex(max_match_len=4)
    index.add(0, [1, 2, 3, 4, 5])
    match = index.find([7, 7, 4])
    assert (match.source, match.next_pos, match.match_len) == (0, 4, 1)


def test_no_match_and_no_continuation_after_last_token():
    index = ReferenceIndex()
    index.add(0, [1, 2, 3])
    assert index.find([9]) is None
    assert index.find([3]) is None  # nothing follows the last token, so there is nothing to copy


def test_earlier_reference_wins_a_tie():
    index = ReferenceIndex()
    index.add(0, [5, 6, 1])
    index.add(1, [5, 6, 2])
    assert index.find([5, 6]).source == 0


def test_preferred_continuation_wins_a_tie():
    index = ReferenceIndex()
    index.add(0, [5, 6, 1])
    index.add(1, [5, 6, 2])
    match = index.find([5, 6], prefer=(1, 2))
    assert (match.source, match.next_pos, match.match_len) == (1, 2, 2)


def test_preferred_continuation_loses_to_a_longer_match():
    index = ReferenceIndex()
    index.add(0, [4, 5, 6, 1])
    index.add(1, [9, 5, 6, 2])
    match = index.find([4, 5, 6], prefer=(1, 3))
    assert (match.source, match.match_len) == (0, 3)


def test_growing_reference_registers_ngrams_once_they_have_a_successor():
    index = ReferenceIndex()
    index.add(OUTPUT_SOURCE, [])
    index.extend(OUTPUT_SOURCE, [1, 2])
    assert index.find([2]) is None
    assert index.find([1]).next_pos == 1
    index.extend(OUTPUT_SOURCE, [3])
    match = index.find([1, 2])
    assert (match.next_pos, match.match_len) == (2, 2)
    assert index.continuation(match, 5) == [3]


def test_match_length_is_capped():
    index = ReferenceIndex(max_match_len=2)
    index.add(0, [1, 2, 3, 4])
    assert index.find([1, 2, 3]).match_len == 2


def test_duplicate_source_and_bad_settings_are_refused():
    index = ReferenceIndex()
    index.add(0, [1])
    with pytest.raises(ValueError):
        index.add(0, [2])
    with pytest.raises(ValueError):
        ReferenceIndex(max_match_len=0)


def _longest_by_brute_force(sources: list[list[int]], query: list[int], max_match_len: int):
    """The definition, spelled out: the longest suffix of `query` that ends somewhere a token follows; a tie
    goes to the earlier source, then the earlier position."""
    for n in range(min(max_match_len, len(query)), 0, -1):
        for s, tokens in enumerate(sources):
            for end in range(n - 1, len(tokens) - 1):
                if tokens[end - n + 1 : end + 1] == query[-n:]:
                    return s, end + 1, n
    return None


def test_lookup_equals_the_brute_force_definition_on_random_text():
    rng = random.Random(7)
    for _ in range(400):
        vocab = rng.choice([2, 4, 30])
        sources = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 25))] for _ in range(rng.randrange(1, 4))]
        max_match_len = rng.choice([1, 3, 12])
        index = ReferenceIndex(max_match_len=max_match_len)
        for s, tokens in enumerate(sources[:-1]):
            index.add(s, tokens)
        grown = len(sources) - 1  # the last one grows a few tokens at a time, as the reply so far does
        index.add(grown, [])
        full, sources[grown] = sources[grown], []
        for token in full:
            index.extend(grown, [token])
            sources[grown].append(token)
            query = [rng.randrange(vocab) for _ in range(rng.randrange(1, 15))]
            found = index.find(query)
            expected = _longest_by_brute_force(sources, query, max_match_len)
            assert (found and (found.source, found.next_pos, found.match_len)) == expected
