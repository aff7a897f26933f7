"""app.py stops with one clear line and exit code 2 when a setting is wrong or the model cannot be loaded.

One case runs `python app.py` as a process, for the exit code the shell sees; the others call its `main` in this
process (the same code, without five more starts of Python, torch and Gradio).
"""

import os
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


def run_main(monkeypatch, capsys, tmp_path: Path, **env_vars: str) -> tuple[int, str, str]:
    """app.main() under app.py's environment for these tests: its exit code, stdout and stderr."""
    import app

    for name in [name for name in os.environ if name.startswith("CHATBOT_")]:
        monkeypatch.delenv(name)
    for name, value in server_env(tmp_path / "data", CHATBOT_ADMIN_PASSWORD="password-9", **env_vars).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_:
        app.main()
    printed = capsys.readouterr()
    return exit_.value.code, printed.out, printed.err


def test_a_model_that_is_not_there_ends_the_process_with_one_line_and_exit_code_2(tmp_path: Path):
    env = server_env(tmp_path / "data", CHATBOT_MODEL=str(tmp_path / "no-such-model"),
                     CHATBOT_ADMIN_PASSWORD="password-9")
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot load the model:") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr + done.stdout


def test_a_corrupt_model_is_one_line_and_exit_code_2(monkeypatch, capsys, tmp_path: Path):
    code, out, err = run_main(monkeypatch, capsys, tmp_path, CHATBOT_MODEL=str(corrupt_model(tmp_path / "broken")))
    assert code == 2
    assert err.startswith("error: cannot load the model:") and err.count("\n") == 1
    assert "Traceback" not in err + out


def test_bfloat16_with_one_token_steps_is_refused_at_start_with_the_reason(monkeypatch, capsys, tmp_path: Path):
    code, out, err = run_main(monkeypatch, capsys, tmp_path, CHATBOT_DTYPE="bfloat16", CHATBOT_STEP_WIDTH="0")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: CHATBOT_DTYPE / CHATBOT_STEP_WIDTH: bfloat16 with one-token steps")
    assert "differ from greedy" in err and "Traceback" not in err + out


def test_a_step_width_that_is_not_one_is_refused_with_the_choices(monkeypatch, capsys, tmp_path: Path):
    code, _, err = run_main(monkeypatch, capsys, tmp_path, CHATBOT_STEP_WIDTH="wide")
    assert code == 2 and err.startswith("error: bad setting:")
    assert "step width must be auto, 0 (one-token steps) or a positive number" in err


def test_an_embedding_model_that_is_not_there_is_refused_with_the_choices(monkeypatch, capsys, tmp_path: Path):
    code, out, err = run_main(monkeypatch, capsys, tmp_path, CHATBOT_EMBEDDING_MODEL=str(tmp_path / "no-model"))
    assert code == 2 and err.startswith("error: bad setting:") and err.count("\n") == 1
    assert "CHATBOT_EMBEDDING_MODEL: no folder for" in err and "all-MiniLM-L6-v2 (bundled)" in err
    assert "Traceback" not in err + out
