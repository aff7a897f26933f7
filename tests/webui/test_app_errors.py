"""app.py stops with one clear line and exit code 2 when the model cannot be loaded."""

import subprocess
import sys
from pathlib import Path

import pytest
from webui_helpers import REPO, server_env

pytestmark = pytest.mark.slow


def corrupt_model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text("{ this is not json")
    return folder


@pytest.mark.parametrize("make_model", [lambda tmp: tmp / "no-such-model", lambda tmp: corrupt_model(tmp / "broken")])
def test_bad_model_path_is_one_line_and_exit_code_2(tmp_path: Path, make_model):
    env = server_env(tmp_path / "data", CHATBOT_MODEL=str(make_model(tmp_path)), CHATBOT_ADMIN_PASSWORD="password-9")
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot load the model:") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr + done.stdout


def run_app(tmp_path: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = server_env(tmp_path / "data", CHATBOT_ADMIN_PASSWORD="password-9", **env_vars)
    return subprocess.run([sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_bfloat16_with_one_token_steps_is_refused_at_start_with_the_reason(tmp_path: Path):
    done = run_app(tmp_path, CHATBOT_DTYPE="bfloat16", CHATBOT_STEP_WIDTH="0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: CHATBOT_DTYPE / CHATBOT_STEP_WIDTH: bfloat16 with one-token steps")
    assert "differ from greedy" in done.stderr and "Traceback" not in done.stderr + done.stdout


def test_a_step_width_that_is_not_one_is_refused_with_the_choices(tmp_path: Path):
    done = run_app(tmp_path, CHATBOT_STEP_WIDTH="wide")
    assert done.returncode == 2 and done.stderr.startswith("error: bad setting:")
    assert "step width must be auto, 0 (one-token steps) or a positive number" in done.stderr


def test_an_embedding_model_that_is_not_there_is_refused_with_the_choices(tmp_path: Path):
    done = run_app(tmp_path, CHATBOT_EMBEDDING_MODEL=str(tmp_path / "no-model"))
    assert done.returncode == 2 and done.stderr.startswith("error: bad setting:") and done.stderr.count("\n") == 1
    assert "CHATBOT_EMBEDDING_MODEL: no folder for" in done.stderr and "all-MiniLM-L6-v2 (bundled)" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
