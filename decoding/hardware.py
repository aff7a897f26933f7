"""Which device and dtype to decode in, from a setting and what the hardware offers.

bfloat16 is only worth it where matrix products have native bf16 kernels (a CUDA GPU that supports it, a CPU with
AVX512-BF16 or AMX-BF16), or where they multiply no bf16 at all: the integer weight formats on an AVX2 CPU.
Elsewhere bf16 is emulated and slower than float32.
"""

import platform
from dataclasses import dataclass
from pathlib import Path

import torch

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
REPORTED_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class CpuFeatures:
    """The processor and the flags that decide its fast kernels, for the benchmark report."""

    model_name: str
    flags: tuple[str, ...]  # those of REPORTED_CPU_FLAGS it has

    @property
    def has_bf16(self) -> bool:
        return any(flag in self.flags for flag in BF16_CPU_FLAGS)


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
    """Model name and relevant flags from /proc/cpuinfo (Linux); no flags where it cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return CpuFeatures(platform.processor() or platform.machine(), ())
    fields = dict(_field(line) for line in text.splitlines() if ":" in line)  # the last CPU's fields win: all alike
    flags = set(fields.get("flags", "").split())
    name = fields.get("model name") or platform.processor() or platform.machine()
    return CpuFeatures(name, tuple(flag for flag in REPORTED_CPU_FLAGS if flag in flags))


def onednn_has_bf16() -> bool:
    """Whether oneDNN runs bf16 products on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): its prepacked weights
    refuse bf16 elsewhere, where bf16 is emulated anyway."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def native_bf16(features: CpuFeatures | None = None) -> bool:
    """Whether bf16 products run natively on this CPU: it has the flags and PyTorch's products (oneDNN) use them,
    which they do not where they are held to a lower instruction set (ONEDNN_MAX_CPU_ISA=AVX2, what a CPU without
    AVX-512 runs): the choices that follow from it are then that CPU's."""
    return (features or cpu_features()).has_bf16 and onednn_has_bf16()


def device_name(device: torch.device | str) -> str:
    """The GPU's name on CUDA (e.g. "NVIDIA H200"), else the processor's: what a reply or a timing ran on."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_features().model_name


def synchronize(device: torch.device | str) -> None:
    """Wait for the kernels queued on a CUDA device, so that a clock read next times the work, not its launch."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pick_device(setting: str = "auto") -> torch.device:
    """"auto" is CUDA when a GPU is visible, else the CPU; "cpu" or "cuda" are taken as said."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {setting!r}")
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but no CUDA GPU is visible")
    return torch.device(setting)


def pick_dtype(setting: str, device: torch.device | str, integer_weights: bool = False) -> torch.dtype:
    """"auto" is bfloat16 where the device has native bf16 kernels, else float32; on a CPU with AVX2 but no bf16
    kernels, bfloat16 too where the packed forward may hold integer weights (`integer_weights`: the weights
    setting is auto, q4, int8 or int4, with W-wide steps). Those formats need bf16 activations and multiply no bf16:
    held to AVX2, q4 weights decoded 172 tokens/s where dense float32 decoded 36 (docs/kernels/avx2.md)."""
    if setting in DTYPES:
        return DTYPES[setting]
    if setting != "auto":
        raise ValueError(f"dtype must be auto, float32 or bfloat16, not {setting!r}")
    if torch.device(device).type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    features = cpu_features()
    return torch.bfloat16 if native_bf16(features) or (integer_weights and "avx2" in features.flags) else torch.float32


def _field(line: str) -> tuple[str, str]:
    key, _, value = line.partition(":")
    return key.strip(), value.strip()
