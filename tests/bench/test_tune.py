"""The policy tuner's replay: no model, recorded greedy replies priced with the cost curve."""

import pytest

from bench.methods import paper_policy
from bench.tune import modeled_speedup, tuning_selection

REPLY = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]


def test_a_reply_drafted_from_itself_is_modeled_faster_and_no_reference_as_greedy():
    records = [
        {"kind": "repeat", "prompt": [1, 2, 3], "greedy": REPLY, "refs": [REPLY]},
        {"kind": "novel", "prompt": [1, 2, 3], "greedy": REPLY, "refs": []},
    ]
    repeat = modeled_speedup(records, "repeat", paper_policy())
    novel = modeled_speedup(records, "novel", paper_policy())
    assert repeat.speedup > 2 and repeat.worst == repeat.speedup
    assert novel.speedup == pytest.approx(1.0) and novel.worst == pytest.approx(1.0)


def test_tuning_selection_takes_later_wordings_of_the_first_groups():
    selection = tuning_selection(groups=2)
    assert len(selection.repeat) == 2 and len(selection.novel) == 1
    assert {q.group for q in selection.cache_assisted} == {q.group for q in selection.repeat}
    assert not selection.rag and not selection.followup
    assert all(q not in selection.repeat and not q.follow_up for q in selection.cache_assisted)
