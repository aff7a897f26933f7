"""Staff login for /admin: accounts checked by the admin service, failed logins throttled, idle sessions expired.

Gradio's login route calls `StaffLogin.check` with only a name and a password, so what needs the client's
address or the session cookie (throttling, the audit row of each attempt, idle expiry) sits in `LoginGuard`,
a plain ASGI middleware in front of the admin app.
"""

import functools
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie

import anyio
import gradio as gr
from starlette.requests import Request

from chatbot import AdminService, PermissionDenied

# For events that are UI plumbing: hidden from the API page and refused to gradio clients.
PRIVATE = {"api_visibility": "private"}
TOKEN_COOKIE = "access-token"  # Gradio's login cookies are named access-token-<id> and access-token-unsecure-<id>
MAX_TRACKED = 10_000  # throttle records kept before stale ones are dropped


@dataclass(frozen=True)
class LoginLimits:
    max_failures: int = 5  # failed logins for one name, or from one address, within `window_s` ...
    window_s: float = 900.0
    lockout_s: float = 60.0  # ... lock it this long, doubling with each lockout in a row ...
    lockout_max_s: float = 3600.0  # ... up to this
    idle_s: float = 1800.0  # a staff session unused this long must log in again


class StaffLogin:
    """Gradio's auth callback and the per-handler check that a request carries a staff login."""

    def __init__(self, admin: AdminService) -> None:
        self.admin = admin

    async def check(self, user: str, password: str) -> bool:
        """Gradio's login callback; argon2 runs in a worker thread so the server keeps serving meanwhile."""
        account = await anyio.to_thread.run_sync(self.admin.authenticate, user, password)
        return account is not None

    def require(self, request: gr.Request | None) -> str:
        """The logged-in staff name of a request (checked again by role in the admin service)."""
        if request is None or not request.username:
            raise gr.Error("Please log in with your staff account.")
        return request.username


def shows_refusals(handler: Callable) -> Callable:
    """Let a handler's PermissionDenied reach the page as a message instead of a generic error."""

    @functools.wraps(handler)
    def wrapped(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except PermissionDenied as err:
            raise gr.Error(str(err), print_exception=False) from err

    return wrapped


@dataclass
class _Failures:
    times: deque = field(default_factory=deque)
    lockouts: int = 0  # lockouts in a row: each one doubles the next
    locked_until: float = 0.0


class LoginThrottle:
    """Failed logins counted per name and per address; too many within the window lock that key for a while.

    A locked key refuses every attempt, right password or not, until the lock passes; success clears the
    name's record (not the address's, so one known account cannot be used to unlock guessing at others).
    """

    def __init__(self, limits: LoginLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self._records: dict[tuple[str, str], _Failures] = {}

    def wait_s(self, name: str, address: str) -> float:
        """Seconds until this name and address may try again; 0 when they may now."""
        now = self.clock()
        records = [self._records.get(("name", name)), self._records.get(("address", address))]
        return max([record.locked_until - now for record in records if record] + [0.0])

    def failed(self, name: str, address: str) -> None:
        for key in (("name", name), ("address", address)):
            self._fail(key)
        if len(self._records) > MAX_TRACKED:
            self._prune()

    def succeeded(self, name: str) -> None:
        self._records.pop(("name", name), None)

    def _fail(self, key: tuple[str, str]) -> None:
        limits, now = self.limits, self.clock()
        record = self._records.setdefault(key, _Failures())
        if now - record.locked_until > limits.lockout_max_s:
            record.lockouts = 0  # quiet for long enough: start again from the shortest lockout
        while record.times and now - record.times[0] > limits.window_s:
            record.times.popleft()
        record.times.append(now)
        if len(record.times) >= limits.max_failures:
            record.lockouts += 1
            record.locked_until = now + min(limits.lockout_s * 2 ** (record.lockouts - 1), limits.lockout_max_s)
            record.times.clear()

    def _prune(self) -> None:
        now = self.clock()
        for key, record in list(self._records.items()):
            recent = record.times and now - record.times[-1] <= self.limits.window_s
            if record.locked_until <= now and not recent:
                del self._records[key]


class LoginGuard:
    """ASGI middleware for the admin app at `prefix`: throttled and audited logins, idle sessions expired."""

    def __init__(self, app, prefix: str, admin: AdminService, limits: LoginLimits) -> None:
        self.app, self.prefix, self.admin, self.limits = app, prefix, admin, limits
        self.throttle = LoginThrottle(limits)
        self._last_seen: dict[str, float] = {}  # session token -> monotonic time of its last request

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix + "/"):
            return await self.app(scope, receive, send)
        route = scope["path"][len(self.prefix):].rstrip("/")
        if route == "/login" and scope["method"] == "POST":
            return await self._login(scope, receive, send)
        await self.app(self._without_stale_session(scope, route), receive, send)

    # --- login ---------------------------------------------------------------------------------------

    async def _login(self, scope, receive, send) -> None:
        body = await _read_body(receive)
        replay = _replayer(body)
        form = await Request(scope, replay).form()
        name, address = str(form.get("username", "")).strip(), (scope.get("client") or ("?",))[0]
        wait = self.throttle.wait_s(name, address)
        if wait > 0:
            await anyio.to_thread.run_sync(self.admin.record_login, name, False, address, "locked")
            return await _locked(send, wait)

        async def watch(message) -> None:
            if message["type"] == "http.response.start":  # count and audit before the client hears the outcome
                await self._after_login(name, address, message)
            await send(message)

        await self.app(scope, _replayer(body), watch)

    async def _after_login(self, name: str, address: str, response_start: dict) -> None:
        ok = response_start["status"] == 200
        if ok:
            self.throttle.succeeded(name)
            now = time.monotonic()
            self._last_seen.update((t, now) for t in _set_cookie_tokens(response_start.get("headers", [])))
        else:
            self.throttle.failed(name, address)
        await anyio.to_thread.run_sync(self.admin.record_login, name, ok, address, "" if ok else "wrong password")

    # --- idle sessions -------------------------------------------------------------------------------

    def _without_stale_session(self, scope, route: str):
        """The request as Gradio should see it: login cookies of an unknown or idle session removed."""
        headers = scope.get("headers", [])
        cookie = b"; ".join(value for key, value in headers if key == b"cookie").decode("latin-1")
        if TOKEN_COOKIE not in cookie:
            return scope
        jar = SimpleCookie()
        jar.load(cookie)
        tokens = {morsel.value for name, morsel in jar.items() if name.startswith(TOKEN_COOKIE)}
        now = time.monotonic()
        live = [t for t in tokens if now - self._last_seen.get(t, -math.inf) <= self.limits.idle_s]
        if live and route != "/logout":
            if "/heartbeat/" not in route:  # an open tab's keep-alive is not activity
                self._last_seen.update((t, now) for t in live)
            return scope
        for token in tokens:
            self._last_seen.pop(token, None)
        kept = "; ".join(f"{n}={m.value}" for n, m in jar.items() if not n.startswith(TOKEN_COOKIE))
        others = [(k, v) for k, v in headers if k != b"cookie"]
        return {**scope, "headers": [*others, (b"cookie", kept.encode("latin-1"))] if kept else others}


async def _read_body(receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replayer(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _set_cookie_tokens(headers) -> list[str]:
    tokens = []
    for key, value in headers:
        if key.lower() == b"set-cookie":
            jar = SimpleCookie()
            jar.load(value.decode("latin-1"))
            tokens += [m.value for n, m in jar.items() if n.startswith(TOKEN_COOKIE) and m.value]
    return tokens


async def _locked(send, wait: float) -> None:
    seconds = math.ceil(wait)
    detail = f"Too many failed logins for this name or address. Try again in {seconds} seconds."
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", str(seconds).encode())]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
