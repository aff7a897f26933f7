"""One app.py shared by the reliability tests, started without CHATBOT_ADMIN_PASSWORD so it makes one up.

A second start on another data folder runs only until it prints its own generated password, which app.py does
before it loads the model, so that the access tests can compare two generated passwords.
"""

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.reliability.app_process import App, launch, read_store, stop, wait_for_log, wait_until_up


@dataclass
class Servers:
    main: App
    second_password: str  # printed by a second start on another data folder, stopped once it had


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("reliability")
    (root / "second").mkdir()
    main = launch(root / "data", root / "server.log")
    second = launch(root / "second" / "data", root / "second" / "server.log")
    try:
        second_password = wait_for_log(second, r"^Admin login: admin / (\S+)$").group(1)
        stop(second)
        yield Servers(wait_until_up(main), second_password)
    finally:
        stop(second)
        stop(main)


@pytest.fixture(scope="session")
def server(servers: Servers) -> App:
    return servers.main


@pytest.fixture(scope="session")
def admin_password(server: App) -> str:
    password = server.printed_password()
    assert password, f"app.py printed no generated admin password:\n{server.log_text()[-2000:]}"
    return password


@pytest.fixture(scope="session")
def chat_client(server: App):
    from gradio_client import Client

    return Client(f"{server.url}/", verbose=False)


@pytest.fixture(scope="session")
def admin_client(server: App, admin_password: str):
    from gradio_client import Client

    return Client(server.admin_url, auth=("admin", admin_password), verbose=False)


@pytest.fixture
def store_counts(server: App):
    """(entries, replies) in the shared server's database right now, as a callable."""
    def counts() -> tuple[int, int]:
        state = read_store(server.data_dir)
        return len(state.entry_ids), len(state.reply_ids)

    return counts
