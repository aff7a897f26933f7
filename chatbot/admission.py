"""Admission to the model: a bounded line of questions, a share per client, and `at_once` turns at a time, in order.

A question is admitted or refused the moment it arrives (ChatBusy, nothing stored); an admitted one waits its
turn first come, first served, and is answered and stored like any other. `at_once` is how many turns the service
decodes together (its scheduler's slots on the packed forward; 1 where turns take turns on the model).
Cost: O(1) per admit and release.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

BUSY = "The helpdesk is busy right now; please try again in a minute. (Your question was not saved.)"
CLIENT_BUSY = (
    "You already have {count} question(s) waiting for an answer; please wait for them before asking more. "
    "(This question was not saved.)"
)


class ChatBusy(Exception):
    """Refused at once because the line is full or this client already has its share of it."""


@dataclass(frozen=True)
class ChatLimits:
    queue_size: int = 16  # questions waiting or being answered, all clients together
    per_client: int = 2  # of those, from one browser session or API client
    per_address: int = 8  # of those, from one IP address; 0 turns this limit off (e.g. behind a proxy)
    at_once: int = 1  # of those, how many are answered at the same time (ChatService.turns_at_once)

    def __post_init__(self) -> None:
        if self.queue_size < 1 or self.per_client < 1 or self.per_address < 0 or self.at_once < 1:
            raise ValueError(f"queue_size, per_client and at_once must be >= 1 and per_address >= 0: {self}")


class Admission:
    def __init__(self, limits: ChatLimits = ChatLimits()) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._turn_changed = threading.Condition(self._lock)
        self._waiting = 0
        self._by_client: dict[str, int] = {}
        self._by_address: dict[str, int] = {}
        self._next_ticket = 0  # tickets are handed out in arrival order
        self._serving = 0  # the next ticket to be let in
        self._answering = 0  # turns let in and not yet done
        self._left: set[int] = set()  # tickets that left the line before their turn, not yet passed by _serving

    @contextmanager
    def turn(self, client: str, address: str) -> Iterator[None]:
        """Hold a place among the turns answered now; raises ChatBusy at once when the question may not queue."""
        ticket = self._admit(client, address)
        entered = False
        try:
            with self._turn_changed:
                self._turn_changed.wait_for(
                    lambda: self._serving == ticket and self._answering < self.limits.at_once
                )
                self._answering += 1
                entered = True
                self._pass(ticket)
            yield
        finally:
            self._release(ticket, client, address, entered)

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._waiting

    def _admit(self, client: str, address: str) -> int:
        limits = self.limits
        with self._lock:
            if self._waiting >= limits.queue_size:
                raise ChatBusy(BUSY)
            if self._by_client.get(client, 0) >= limits.per_client:
                raise ChatBusy(CLIENT_BUSY.format(count=self._by_client[client]))
            if limits.per_address and self._by_address.get(address, 0) >= limits.per_address:
                raise ChatBusy(CLIENT_BUSY.format(count=self._by_address[address]))
            self._waiting += 1
            _count(self._by_client, client, 1)
            _count(self._by_address, address, 1)
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            return ticket

    def _release(self, ticket: int, client: str, address: str, entered: bool) -> None:
        """Leave the line: done or failed (a ticket that leaves before its turn is skipped when it comes)."""
        with self._turn_changed:
            self._waiting -= 1
            _count(self._by_client, client, -1)
            _count(self._by_address, address, -1)
            if entered:
                self._answering -= 1
            else:
                self._left.add(ticket)
                self._pass(self._serving - 1)
            self._turn_changed.notify_all()

    def _pass(self, ticket: int) -> None:
        """The next ticket to let in follows `ticket`, skipping those that left the line before their turn."""
        self._serving = max(self._serving, ticket + 1)
        while self._serving in self._left:
            self._left.remove(self._serving)
            self._serving += 1
        self._turn_changed.notify_all()


def _count(counts: dict[str, int], key: str, step: int) -> None:
    """Add `step` to `counts[key]`, dropping keys that reach zero so the dict holds only current clients."""
    value = counts.get(key, 0) + step
    if value:
        counts[key] = value
    else:
        counts.pop(key, None)
