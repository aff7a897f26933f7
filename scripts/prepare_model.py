"""Convert the bundled SmolLM2 GGUF into a safetensors model folder, once (the Makefile calls this)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decoding.model_loading import DEFAULT_MODEL_DIR, prepare_bundled_model  # noqa: E402

if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL_DIR
    target.parent.mkdir(parents=True, exist_ok=True)
    print(prepare_bundled_model(target))
