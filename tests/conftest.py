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

torch.set_num_threads(2)


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
