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
    env = server_env(tmp_path / "data", CHATBOT_MODEL=str(make_model(tmp_path)), CHATBOT_ADMIN_PASSWORD="x")
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot load the model:") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr + done.stdout
