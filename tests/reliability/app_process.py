"""Run `python app.py` in a subprocess (start, stop, SIGKILL) and read what it left in its data folder."""

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import faiss
import httpx

from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from decoding.hardware import cpu_features
from decoding.lane_kernel import ISA_VARIABLE
from decoding.weights import q4_refusal
from tests.threads import TEST_THREADS

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 300  # model, embedder and Gradio load in ~30 s alone; far longer on a busy 2-core machine
DB_FILE, INDEX_FILE = "cache.sqlite3", "questions.faiss"
TRACEBACK_MARKERS = ("Traceback", 'File "')
# Refused input is raised as gr.Error, which Gradio logs with its traceback; anything else is a server fault.
EXPECTED_TRACEBACK_ENDS = ("gradio.exceptions.Error:", "chatbot.prompt.InputError:")


@dataclass
class App:
    """One running `app.py`: its process group, address, data folder and captured output."""

    process: subprocess.Popen
    url: str  # without a trailing slash
    data_dir: Path
    log: Path

    @property
    def admin_url(self) -> str:
        return f"{self.url}/admin/"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def printed_password(self) -> str | None:
        """The admin password app.py printed at start, if it generated one."""
        found = re.search(r"^Admin login: \S+ / (\S+)$", self.log_text(), re.MULTILINE)
        return found.group(1) if found and not found.group(1).startswith("(") else None

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False


def likely_auto_weights() -> str:
    """The weight format `auto` chose on the CPUs seen so far: q4 where it runs (AVX512-BF16 and the lane library
    built), else int4 where the CPU has bf16 (int formats need bf16 activations), else dense."""
    if q4_refusal() is None:
        return "q4"
    return "int4" if cpu_features().has_bf16 else "dense"

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(data_dir: Path, log: Path, max_new_tokens: int = 16, **extra_env: str) -> App:
    """Start app.py in its own process group without waiting for it; output goes to `log`."""
    port = free_port()
    # The app's settings are the test's; the kernel hold (CHATBOT_KERNEL_ISA) is the machine's, as
    # ATEN_CPU_CAPABILITY is: a run held to AVX2 holds its app processes too.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATBOT_") or k == ISA_VARIABLE}
    env.update({
        "CHATBOT_DATA_DIR": str(data_dir), "CHATBOT_PORT": str(port), "CHATBOT_MAX_NEW_TOKENS": str(max_new_tokens),
        "CHATBOT_THREADS": str(TEST_THREADS), "GRADIO_ANALYTICS_ENABLED": "False",
        "GRADIO_TEMP_DIR": str(data_dir.parent / "gradio"), "PYTHONUNBUFFERED": "1",
        # A given width and weight format: measuring them (about 20 s of every start for the three formats) is
        # tested in tests/chatbot/test_deployment.py and tests/decoding/test_packed.py.
        "CHATBOT_STEP_WIDTH": "4",
        "CHATBOT_WEIGHTS": likely_auto_weights(),
        # The bundled MiniLM: the default mpnet seeds the help centre in ~30 s a start (tests/chatbot tests it).
        "CHATBOT_EMBEDDING_MODEL": EMBEDDING_BUNDLED,
        # No prompt warm-up: half a minute of both cores after every start, beside the tests (tests/chatbot tests it).
        "CHATBOT_WARM_PREFIXES": "false",
        **extra_env,
    })
    with open(log, "a") as out:
        process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return App(process, f"http://127.0.0.1:{port}", data_dir, log)


def wait_until_up(app: App, timeout_s: float = START_TIMEOUT_S) -> App:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if app.process.poll() is not None:
            raise RuntimeError(f"app.py exited with {app.process.returncode}:\n{app.log_text()[-3000:]}")
        if app.healthy():
            return app
        time.sleep(0.5)
    raise RuntimeError(f"app.py did not answer within {timeout_s} s:\n{app.log_text()[-3000:]}")


def wait_for_log(app: App, pattern: str, timeout_s: float = START_TIMEOUT_S) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, app.log_text(), re.MULTILINE)
        if found:
            return found
        if app.process.poll() is not None:
            raise RuntimeError(f"app.py exited with {app.process.returncode}:\n{app.log_text()[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{pattern!r} not in the log within {timeout_s} s:\n{app.log_text()[-3000:]}")


def start(data_dir: Path, log: Path, max_new_tokens: int = 16, **extra_env: str) -> App:
    return wait_until_up(launch(data_dir, log, max_new_tokens, **extra_env))


def stop(app: App) -> None:
    """Stop politely (SIGTERM to its process group), then by force."""
    if app.process.poll() is not None:
        return
    os.killpg(app.process.pid, signal.SIGTERM)
    try:
        # The app has no shutdown work; uvicorn's graceful wait (5 s) only holds a client's open Gradio heartbeat.
        app.process.wait(timeout=1)
    except subprocess.TimeoutExpired:
        kill(app)


def kill(app: App) -> None:
    """SIGKILL the app's process group: no cleanup, no flush, like a power cut for the process."""
    if app.process.poll() is None:
        os.killpg(app.process.pid, signal.SIGKILL)
    app.process.wait(timeout=30)


# --- the data folder ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreState:
    """What a data folder holds, read without the app: SQLite read-only, the FAISS file directly."""

    entry_ids: set[int]
    reply_ids: set[int]
    index_ids: set[int] | None  # None when there is no index file
    half_written: list[str]  # entries missing their answer, answer ids or with a token count that disagrees
    integrity: str  # PRAGMA integrity_check: "ok" when the database file is sound

    @property
    def index_matches(self) -> bool:
        return self.index_ids == self.entry_ids


def connect_read_only(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{data_dir / DB_FILE}?mode=ro", uri=True, timeout=30)


def read_store(data_dir: Path) -> StoreState:
    with closing(connect_read_only(data_dir)) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        entries = db.execute("SELECT id, answer, answer_ids, stats FROM entries").fetchall()
        reply_ids = {row[0] for row in db.execute("SELECT id FROM replies")}
    index_path = data_dir / INDEX_FILE
    index_ids = None
    if index_path.exists():
        index = faiss.read_index(str(index_path))
        index_ids = set(faiss.vector_to_array(index.id_map).tolist())
    half = [problem for row in entries if (problem := _half_written(*row))]
    return StoreState({row[0] for row in entries}, reply_ids, index_ids, half, integrity)


def _half_written(entry_id: int, answer: str | None, answer_ids: str | None, stats: str | None) -> str:
    ids = json.loads(answer_ids) if answer_ids else None
    if not answer or not ids:
        return f"entry {entry_id}: answer {answer!r}, answer_ids {answer_ids!r}"
    tokens = (json.loads(stats) if stats else {}).get("tokens")
    if tokens is not None and tokens != len(ids):
        return f"entry {entry_id}: stats say {tokens} tokens but {len(ids)} answer ids are stored"
    return ""


def replies_table(data_dir: Path, ids: set[int] | None = None) -> dict[int, dict]:
    """Stored replies by id: question, answer, history, session and entry."""
    with closing(connect_read_only(data_dir)) as db:
        rows = db.execute("SELECT id, question, answer, history, session_id, entry_id FROM replies").fetchall()
    return {
        row[0]: {"question": row[1], "answer": row[2], "history": json.loads(row[3]), "session_id": row[4],
                 "entry_id": row[5]}
        for row in rows if ids is None or row[0] in ids
    }


def entry_questions(data_dir: Path) -> dict[int, str]:
    with closing(connect_read_only(data_dir)) as db:
        rows = db.execute("SELECT id, question FROM entries").fetchall()
    return dict(rows)


def unexpected_tracebacks(log: str) -> list[str]:
    """The last line of every traceback in a server log that is not a refused message (gr.Error)."""
    ends = []
    for chunk in log.split("Traceback (most recent call last):")[1:]:
        last = next((line for line in chunk.splitlines() if line and not line.startswith((" ", "\t"))), "")
        if not last.startswith(EXPECTED_TRACEBACK_ENDS):
            ends.append(last)
    return ends
