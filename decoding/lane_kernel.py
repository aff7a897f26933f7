"""Builds and loads the lane library once per machine: the lane attention kernel and RMS norm
(decoding/csrc/lane_attention.cpp), the q4 weight product (decoding/csrc/q4_product.cpp), the bf16 head product
(decoding/csrc/head_product.cpp) and greedy's argmax (decoding/csrc/first_argmax.cpp).

The kernel is compiled for the machine's own CPU (-march=native: AVX-512 where it has it, else AVX2) into a
folder under ~/.cache named after the source, torch's version, the CPU's flags and the instruction set, so an
edited source, another torch or another CPU builds anew (~15 s) and processes on one machine share a build
(torch's extension loader locks it). CHATBOT_KERNEL_ISA=avx2 builds the AVX2 paths instead (-mavx2 -mfma -mf16c,
into their own folder), so they run and are tested on an AVX-512 machine too; a process loads one build.
Where it cannot be built (no C++ compiler, no ninja), the packed forward keeps attending through SDPA, lane by
lane, and says so.
"""

import hashlib
import logging
import os
import platform
from functools import cache
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCES = [Path(__file__).parent / "csrc" / name
           for name in ("lane_attention.cpp", "q4_product.cpp", "head_product.cpp", "first_argmax.cpp")]
HEADERS = [Path(__file__).parent / "csrc" / "lanes.h"]  # included by the sources: part of a build's name too
BUILD_ROOT = Path.home() / ".cache" / "llma-helpdesk" / "kernels"
ISA_VARIABLE = "CHATBOT_KERNEL_ISA"
# The compiler's flags for each instruction set the library can be built for, and the CPU flags it needs.
ISA_CFLAGS = {"native": ["-march=native"], "avx2": ["-mavx2", "-mfma", "-mf16c"]}
ISA_CPU_FLAGS = {"native": (), "avx2": ("avx2", "fma", "f16c")}


@cache
def kernel_isa() -> str:
    """The instruction set the lane library is built for: "native" (this CPU's own) unless CHATBOT_KERNEL_ISA
    says "avx2". Read here only, once a process."""
    return os.environ.get(ISA_VARIABLE, "").strip().lower() or "native"


def kernel_paths() -> str | None:
    """The vector paths the loaded library runs: "avx512-bf16", "avx512", "avx2" or "scalar"; None when not built."""
    return None if lane_kernel_refusal() is not None else str(torch.ops.llma.vector_paths())


@cache
def lane_kernel_refusal() -> str | None:
    """None once `torch.ops.llma.lane_attention` is loaded, else why it could not be (once per process)."""
    if platform.system() != "Linux":
        return f"the lane kernel is built on Linux only, not {platform.system()}"
    isa = kernel_isa()
    refusal = isa_refusal(isa)
    if refusal is not None:
        logger.warning("lane attention kernel not built (%s); decode steps attend through SDPA", refusal)
        return refusal
    try:
        from torch.utils.cpp_extension import load

        _put_ninja_on_path()

        # -march=native: a build is this CPU's, so the CPU's flags are part of its name (and the ISA's flags)
        sources = b"".join(source.read_bytes() for source in [*SOURCES, *HEADERS])
        flags = ISA_CFLAGS[isa]
        digest = hashlib.sha256(sources + torch.__version__.encode() + _cpu_flags().encode() + " ".join(flags).encode())
        folder = BUILD_ROOT / f"{isa}-{digest.hexdigest()[:16]}"
        folder.mkdir(parents=True, exist_ok=True)
        load(name="llma_lane_attention", sources=[str(source) for source in SOURCES], build_directory=str(folder),
             extra_cflags=["-O3", *flags, "-fopenmp"], extra_ldflags=["-fopenmp"],
             is_python_module=False, verbose=False)
    except Exception as exc:  # no compiler, no ninja, a failed build: SDPA it is
        logger.warning("lane attention kernel not built (%s); decode steps attend through SDPA", exc)
        return f"not built: {exc}"
    return None


def isa_refusal(isa: str) -> str | None:
    """Why the lane library cannot be built for `isa` on this CPU, or None."""
    if isa not in ISA_CFLAGS:
        return f"{ISA_VARIABLE} must be one of {', '.join(ISA_CFLAGS)}, not {isa!r}"
    missing = [flag for flag in ISA_CPU_FLAGS[isa] if flag not in _cpu_flags().split()]
    if missing:
        return f"the {isa} build needs CPU flags this CPU lacks: {', '.join(missing)}"
    return None


def _cpu_flags() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    return next((line for line in lines if line.startswith(("flags", "Features"))), platform.machine())


def _put_ninja_on_path() -> None:
    """torch's extension loader runs `ninja` from PATH; the one requirements.txt installs lies in the virtual
    environment, which is not on PATH when make runs its python by path."""
    try:
        import ninja
    except ImportError:  # a system ninja may still be there
        return
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])
