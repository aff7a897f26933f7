"""The real server, started once per session as `python app.py` in a subprocess, and admin access to it."""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from webui_helpers import ARTIFACTS, REPO, Server, free_port, server_env

from tests.reliability.app_process import likely_auto_weights

START_TIMEOUT_S = 180

def _wait_until_up(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"app.py exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"app.py did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    root = tmp_path_factory.mktemp("server")
    port, password = free_port(), secrets.token_urlsafe(12)
    env = server_env(
        root / "data", CHATBOT_PORT=str(port), CHATBOT_ADMIN_PASSWORD=password, GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        # A given width and weight format, as tests/reliability/app_process.py gives: measuring them takes 20-30 s
        # of a start and is tested in tests/chatbot/test_deployment.py and tests/decoding.
        CHATBOT_STEP_WIDTH="4", CHATBOT_WEIGHTS=likely_auto_weights(),
    )
    log = root / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(process, url, log)
        yield Server(url, "admin", password, root / "data", root / "gradio", log)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """Stop the server we started (its own process group), politely first."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)  # open Gradio heartbeats keep uvicorn waiting for longer
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@pytest.fixture(scope="session")
def admin_client(server: Server):
    from gradio_client import Client

    return Client(server.admin_url, auth=(server.admin_user, server.admin_password), verbose=False)


@pytest.fixture(scope="session")
def chat_client(server: Server):
    from gradio_client import Client

    return Client(f"{server.url}/", verbose=False)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
