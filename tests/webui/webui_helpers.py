"""Helpers shared by the web UI tests (a plain module: `from conftest import` is ambiguous across packages)."""

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from decoding.lane_kernel import ISA_VARIABLE
from tests.threads import TEST_THREADS

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


@dataclass(frozen=True)
class Server:
    url: str  # without a trailing slash
    admin_user: str
    admin_password: str
    data_dir: Path
    upload_dir: Path  # Gradio's upload/cache folder for this server (GRADIO_TEMP_DIR)
    log: Path

    @property
    def admin_url(self) -> str:
        return f"{self.url}/admin/"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment app.py runs under in these tests: small replies, the run's threads (tests/threads.py),
    a fresh data folder, the bundled MiniLM (the default mpnet seeds the help centre in ~30 s a start; it is
    tested in tests/chatbot/test_embedding_model.py), no prompt warm-up (half a minute of both cores after every
    start, beside the tests; tested in tests/chatbot/test_concurrency.py)."""
    # The app's settings are the test's; the kernel hold (CHATBOT_KERNEL_ISA) is the machine's, as
    # ATEN_CPU_CAPABILITY is: a run held to AVX2 holds its app processes too.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATBOT_") or k == ISA_VARIABLE}
    env.update({"CHATBOT_DATA_DIR": str(data_dir), "CHATBOT_MAX_NEW_TOKENS": "32",
                "CHATBOT_THREADS": str(TEST_THREADS), "CHATBOT_EMBEDDING_MODEL": EMBEDDING_BUNDLED,
                "CHATBOT_WARM_PREFIXES": "false", **extra})
    return env
