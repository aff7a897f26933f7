"""Login throttling on a fake clock, and the check inside every handler that a request carries a login."""

from types import SimpleNamespace

import gradio as gr
import pytest

from webui import LoginLimits, StaffLogin
from webui.auth import LoginThrottle

LIMITS = LoginLimits(max_failures=3, window_s=60, lockout_s=10, lockout_max_s=35)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def throttle(clock) -> LoginThrottle:
    return LoginThrottle(LIMITS, clock)


def fail(throttle: LoginThrottle, times: int, name: str = "ada", address: str = "1.2.3.4") -> None:
    for _ in range(times):
        throttle.failed(name, address)


def test_failures_below_the_limit_do_not_slow_anyone(throttle):
    fail(throttle, 2)
    assert throttle.wait_s("ada", "1.2.3.4") == 0


def test_too_many_failures_lock_the_name_for_a_growing_while(throttle, clock):
    fail(throttle, 3)
    assert throttle.wait_s("ada", "5.6.7.8") == 10  # the name is locked from any address
    clock.now += 10
    assert throttle.wait_s("ada", "5.6.7.8") == 0
    fail(throttle, 3, address="5.6.7.8")
    assert throttle.wait_s("ada", "9.9.9.9") == 20  # the second lockout in a row lasts twice as long
    clock.now += 20
    fail(throttle, 3, address="7.7.7.7")
    assert throttle.wait_s("ada", "9.9.9.9") == 35  # capped


def test_too_many_failures_from_one_address_lock_it_for_every_name(throttle):
    for name in ("a", "b", "c"):
        throttle.failed(name, "6.6.6.6")
    assert throttle.wait_s("someone-else", "6.6.6.6") == 10
    assert throttle.wait_s("someone-else", "1.1.1.1") == 0


def test_old_failures_leave_the_window(throttle, clock):
    fail(throttle, 2)
    clock.now += 61
    fail(throttle, 2)
    assert throttle.wait_s("ada", "1.2.3.4") == 0


def test_a_success_clears_the_name_but_not_the_address(throttle):
    fail(throttle, 2)
    throttle.succeeded("ada")
    throttle.failed("ada", "9.9.9.9")
    assert throttle.wait_s("ada", "9.9.9.9") == 0
    throttle.failed("bob", "1.2.3.4")  # the address's third failure
    assert throttle.wait_s("carl", "1.2.3.4") == 10


@pytest.mark.parametrize("request_", [None, SimpleNamespace(username=None), SimpleNamespace(username="")])
def test_require_refuses_requests_without_a_login(request_):
    with pytest.raises(gr.Error):
        StaffLogin(admin=None).require(request_)


def test_require_names_the_logged_in_user():
    assert StaffLogin(admin=None).require(SimpleNamespace(username="ada")) == "ada"
