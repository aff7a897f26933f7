"""Admission to the model: a bounded line, a share per client and per address, turns in arrival order."""

import threading

import pytest

from chatbot import Admission, ChatBusy, ChatLimits


def hold(admission: Admission, client: str, address: str, entered: threading.Event, release: threading.Event,
         order: list) -> threading.Thread:
    """A question that takes its turn and keeps the model until `release` is set."""
    def run() -> None:
        with admission.turn(client, address):
            order.append(client)
            entered.set()
            release.wait()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_for_waiting(admission: Admission, count: int) -> None:
    while admission.waiting < count:
        threading.Event().wait(0.01)


def test_a_full_line_and_a_client_over_its_share_are_refused_at_once():
    admission = Admission(ChatLimits(queue_size=3, per_client=2, per_address=0))
    release, order = threading.Event(), []
    threads = [hold(admission, "a", "1.1.1.1", threading.Event(), release, order)]
    threads.append(hold(admission, "a", "1.1.1.1", threading.Event(), release, order))
    wait_for_waiting(admission, 2)
    with pytest.raises(ChatBusy, match="already have 2"):
        with admission.turn("a", "1.1.1.1"):
            pass
    threads.append(hold(admission, "b", "1.1.1.1", threading.Event(), release, order))
    wait_for_waiting(admission, 3)
    with pytest.raises(ChatBusy, match="busy"):
        with admission.turn("c", "2.2.2.2"):
            pass
    release.set()
    for thread in threads:
        thread.join()
    assert admission.waiting == 0 and sorted(order) == ["a", "a", "b"]
    with admission.turn("c", "2.2.2.2"):  # the line is free again
        pass


def test_one_address_is_limited_across_its_sessions():
    admission = Admission(ChatLimits(queue_size=10, per_client=5, per_address=2))
    release = threading.Event()
    threads = [hold(admission, f"s{i}", "9.9.9.9", threading.Event(), release, []) for i in range(2)]
    wait_for_waiting(admission, 2)
    with pytest.raises(ChatBusy):
        with admission.turn("s3", "9.9.9.9"):
            pass
    threads.append(hold(admission, "other", "8.8.8.8", threading.Event(), release, []))
    wait_for_waiting(admission, 3)  # another address still gets in line
    release.set()
    for thread in threads:
        thread.join()


def test_turns_are_taken_in_arrival_order_and_a_failed_turn_frees_its_place():
    admission = Admission(ChatLimits(queue_size=8, per_client=8, per_address=0))
    first_in, release, order = threading.Event(), threading.Event(), []
    threads = [hold(admission, "first", "x", first_in, release, order)]
    first_in.wait()
    for name in ("second", "third", "fourth"):
        threads.append(hold(admission, name, "x", threading.Event(), release, order))
        wait_for_waiting(admission, len(threads))
    release.set()
    for thread in threads:
        thread.join()
    assert order == ["first", "second", "third", "fourth"]
    with pytest.raises(RuntimeError), admission.turn("boom", "x"):
        raise RuntimeError("decode failed")
    assert admission.waiting == 0
    with admission.turn("after", "x"):
        pass


@pytest.mark.parametrize("limits", [dict(queue_size=0), dict(per_client=0), dict(per_address=-1)])
def test_limits_must_make_sense(limits):
    with pytest.raises(ValueError):
        ChatLimits(**limits)
