"""Shared fixtures: a tiny random-weight LLaMA for fast property tests and the bundled model for a few real ones."""

import os
from pathlib import Path

# The suite runs several model processes at once on 2 cores (app servers, the bench). OpenMP threads that
# spin while a sibling is descheduled made forwards 3-6x slower then; sleeping waiters do not. The app and
# the bench keep OpenMP's default (spin briefly, then sleep), which is faster on a machine they have alone.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from tests.threads import TEST_THREADS  # noqa: E402

torch.set_num_threads(TEST_THREADS)


# `make test` runs two pytest-xdist workers. Tests spread one by one where their setup is cheap (the tiny
# models, the caches, the data); elsewhere a module stays on one worker, so that its module-scoped setup (a
# service, a bench run, a server) runs once; the modules that share one app server per session stay together.
# (xdist's own loadgroup marks have no effect under pytest 9, which no longer lets it rename tests.)
SPREAD_FOLDERS = ("tests/decoding/", "tests/cache/", "tests/data/")
SHARED_SERVER_MODULES = {
    "tests/reliability/": ("test_access.py", "test_bad_input.py", "test_content.py", "test_handoff.py", "test_load.py"),
    "tests/webui/": ("test_api.py", "test_browser.py"),
}
SHARED_SERVERS = ("server", "servers")  # the session fixtures of those folders' conftest.py


def scheduling_scope(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: a shared server's users, a module, or one test."""
    path = nodeid.split("::")[0]
    folder, name = path[: path.rfind("/") + 1], path[path.rfind("/") + 1 :]
    if name in SHARED_SERVER_MODULES.get(folder, ()):
        return f"{folder}server"
    return nodeid if folder in SPREAD_FOLDERS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedSetupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

    return SharedSetupScheduling(config, log)


HEAVY_FIRST = ("tests/reliability/", "tests/webui/", "tests/bench/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest units first (the servers' tests, the bench run), so no worker is left with one at the end."""
    def rank(item: pytest.Item) -> int:
        scope = scheduling_scope(item.nodeid)
        heavy = scope.endswith("/server") or scope.startswith(HEAVY_FIRST)
        return 0 if scope.endswith("/server") else 1 if heavy else 2

    items.sort(key=rank)


def pytest_itemcollected(item: pytest.Item) -> None:
    """A new module that uses a shared server must join its group, or it would start a second server."""
    uses = [d for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs
            if d.scope == "session" and d.argname in SHARED_SERVERS]
    if uses and scheduling_scope(item.nodeid) != f"{uses[0].baseid}/server":
        raise pytest.UsageError(f"{item.nodeid} uses the shared app server: add its module to "
                                "SHARED_SERVER_MODULES in tests/conftest.py")


def make_tiny_llama(seed: int = 0, vocab_size: int = 64) -> LlamaForCausalLM:
    """A 2-layer LLaMA with random weights; wide init so logits are far apart and ties are rare."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(autouse=True)
def _threads_as_they_were():
    """A test that started a service leaves its scheduler's thread running, and a thread that asked it is on one
    core then (decoding/threads.py): the next test's main thread computes on the cores it had."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model() -> LlamaForCausalLM:
    return make_tiny_llama()


@pytest.fixture(scope="session")
def bundled():
    """The bundled SmolLM2-135M-Instruct (model, tokenizer), loaded once per test session."""
    from decoding import load_model

    return load_model()


# Debian's chromium, driven by Playwright, for the browser tests of the web app and of its reliability.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (make browser) to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server for the whole session (tests/postgres.py); skips when none can start."""
    from tests import postgres as pg

    reason = pg.why_not_available()
    if reason:
        pytest.skip(reason)
    server = pg.start_server()
    yield server
    server.stop()
