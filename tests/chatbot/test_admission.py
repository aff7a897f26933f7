"""Admission to the model: a bounded line, a share per client and per address, turns in arrival order.

Every wait here has a deadline: a broken admission fails the test with what it waited for instead of hanging
the suite (a turn that should have been refused at once would otherwise wait for the model forever).
"""

import threading
import time
from collections.abc import Callable

import pytest

from chatbot import Admission, ChatBusy, ChatLimits

WAIT_S = 10.0  # each step here takes microseconds; this only bounds a broken admission


def hold(admission: Admission, client: str, address: str, entered: threading.Event, release: threading.Event,
         order: list) -> threading.Thread:
    """A question that takes its turn and keeps the model until `release` is set (or WAIT_S passes)."""
    def run() -> None:
        with admission.turn(client, address):
            order.append(client)
            entered.set()
            release.wait(WAIT_S)

    thread = threading.Thread(target=run, daemon=True)  # daemon: a failed test leaves no thread behind
    thread.start()
    return thread


def wait_for_waiting(admission: Admission, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while admission.waiting < count:
        assert time.monotonic() < deadline, f"{count} in line expected within {WAIT_S} s, {admission.waiting} are"
        threading.Event().wait(0.01)


def wait_for_event(event: threading.Event, what: str) -> None:
    assert event.wait(WAIT_S), f"{what} within {WAIT_S} s"


def join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{thread.name} still holds or waits for its turn after {WAIT_S} s"


def take_turn(admission: Admission, client: str, address: str,
              during: Callable[[], None] = lambda: None) -> Exception | None:
    """Take a turn, run `during` in it and leave, in a thread with a deadline: what it raised, None if nothing.

    A question that should be refused at once but is admitted instead waits for its turn; the deadline turns
    that into a failure.
    """
    outcome: dict[str, Exception | None] = {}

    def run() -> None:
        try:
            with admission.turn(client, address):
                during()
        except Exception as err:  # ChatBusy, or what `during` raised: returned to the test to check
            outcome["raised"] = err
        else:
            outcome["raised"] = None

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert "raised" in outcome, f"{client!r} was neither refused nor given its turn within {WAIT_S} s"
    return outcome["raised"]


def refused(admission: Admission, client: str, address: str) -> str:
    """The message of the ChatBusy that refuses this question."""
    raised = take_turn(admission, client, address)
    assert isinstance(raised, ChatBusy), f"{client!r} from {address} should have been refused, got {raised!r}"
    return str(raised)


def test_a_full_line_and_a_client_over_its_share_are_refused_at_once():
    admission = Admission(ChatLimits(queue_size=3, per_client=2, per_address=0))
    release, order = threading.Event(), []
    try:
        threads = [hold(admission, "a", "1.1.1.1", threading.Event(), release, order)]
        threads.append(hold(admission, "a", "1.1.1.1", threading.Event(), release, order))
        wait_for_waiting(admission, 2)
        assert "already have 2" in refused(admission, "a", "1.1.1.1")
        threads.append(hold(admission, "b", "1.1.1.1", threading.Event(), release, order))
        wait_for_waiting(admission, 3)
        assert "busy" in refused(admission, "c", "2.2.2.2")
    finally:
        release.set()
    join_all(threads)
    assert admission.waiting == 0 and sorted(order) == ["a", "a", "b"]
    assert take_turn(admission, "c", "2.2.2.2") is None  # the line is free again


def test_one_address_is_limited_across_its_sessions():
    admission = Admission(ChatLimits(queue_size=10, per_client=5, per_address=2))
    release = threading.Event()
    try:
        threads = [hold(admission, f"s{i}", "9.9.9.9", threading.Event(), release, []) for i in range(2)]
        wait_for_waiting(admission, 2)
        refused(admission, "s3", "9.9.9.9")
        threads.append(hold(admission, "other", "8.8.8.8", threading.Event(), release, []))
        wait_for_waiting(admission, 3)  # another address still gets in line
    finally:
        release.set()
    join_all(threads)


def test_turns_are_taken_in_arrival_order_and_a_failed_turn_frees_its_place():
    admission = Admission(ChatLimits(queue_size=8, per_client=8, per_address=0))
    first_in, release, order = threading.Event(), threading.Event(), []
    try:
        threads = [hold(admission, "first", "x", first_in, release, order)]
        wait_for_event(first_in, "the first question should get its turn")
        for name in ("second", "third", "fourth"):
            threads.append(hold(admission, name, "x", threading.Event(), release, order))
            wait_for_waiting(admission, len(threads))
    finally:
        release.set()
    join_all(threads)
    assert order == ["first", "second", "third", "fourth"]

    def fail() -> None:
        raise RuntimeError("decode failed")

    assert isinstance(take_turn(admission, "boom", "x", during=fail), RuntimeError)
    assert admission.waiting == 0
    assert take_turn(admission, "after", "x") is None


@pytest.mark.parametrize("limits", [dict(queue_size=0), dict(per_client=0), dict(per_address=-1)])
def test_limits_must_make_sense(limits):
    with pytest.raises(ValueError):
        ChatLimits(**limits)


def test_turns_answered_at_once_are_let_in_together_and_the_rest_in_order():
    """A service whose scheduler decodes two replies at once lets two turns in; the third waits for a place."""
    admission = Admission(ChatLimits(queue_size=8, per_client=8, per_address=0, at_once=2))
    entered = {name: threading.Event() for name in ("first", "second", "third", "fourth")}
    release, order = threading.Event(), []
    try:
        threads = [hold(admission, name, "x", entered[name], release, order) for name in ("first", "second")]
        wait_for_event(entered["first"], "the first question should get its turn")
        wait_for_event(entered["second"], "the second question should get its turn alongside the first")
        for name in ("third", "fourth"):
            threads.append(hold(admission, name, "x", entered[name], release, order))
            wait_for_waiting(admission, len(threads))
        assert not entered["third"].wait(0.2), "a third turn got in while two were being answered"
    finally:
        release.set()
    join_all(threads)
    assert order[:2] == ["first", "second"] and sorted(order[2:]) == ["fourth", "third"]
    assert admission.waiting == 0 and take_turn(admission, "after", "x") is None
