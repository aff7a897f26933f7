"""Device and dtype chosen from a setting and what the hardware offers."""

import pytest
import torch

from chatbot.settings import embedding_dtype_for
from decoding import CpuFeatures, cpu_features, hardware, packing, pick_device, pick_dtype
from decoding.hardware import native_bf16

AMD_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx2 fma\n"
XEON_AMX = "model name\t: Intel Xeon Platinum 8481C\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_cpu_features_name_the_processor_and_its_bf16_flags(tmp_path):
    (tmp_path / "amd").write_text(AMD_AVX2)
    (tmp_path / "xeon").write_text(XEON_AMX)
    amd, xeon = cpu_features(tmp_path / "amd"), cpu_features(tmp_path / "xeon")
    assert (amd.model_name, amd.flags, amd.has_bf16) == ("AMD EPYC 7B12", ("avx2",), False)
    assert xeon.flags == ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") and xeon.has_bf16
    assert cpu_features(tmp_path / "missing").flags == ()


def test_pick_dtype():
    assert pick_dtype("float32", "cpu") == torch.float32
    assert pick_dtype("bfloat16", "cpu") == torch.bfloat16
    assert pick_dtype("auto", "cpu") == (torch.bfloat16 if native_bf16() else torch.float32)
    with pytest.raises(ValueError):
        pick_dtype("float16", "cpu")


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError):
        pick_device("tpu")


def test_auto_is_bfloat16_on_an_avx2_cpu_only_where_the_weights_may_be_integer(monkeypatch, tmp_path):
    """Integer weights multiply no bf16, so an AVX2 CPU without bf16 kernels decodes them in bf16 activations; dense
    weights, and a CPU without AVX2, stay in float32."""
    (tmp_path / "amd").write_text(AMD_AVX2)
    amd = cpu_features(tmp_path / "amd")
    monkeypatch.setattr(hardware, "cpu_features", lambda: amd)
    assert pick_dtype("auto", "cpu", integer_weights=True) == torch.bfloat16
    assert pick_dtype("auto", "cpu") == torch.float32
    assert pick_dtype("float32", "cpu", integer_weights=True) == torch.float32  # a dtype said is taken as said
    monkeypatch.setattr(hardware, "cpu_features", lambda: CpuFeatures("old", ()))
    assert pick_dtype("auto", "cpu", integer_weights=True) == torch.float32


def test_q4_steps_prefill_in_q4_where_bf16_products_are_emulated(monkeypatch):
    for native in (True, False):
        monkeypatch.setattr(packing, "onednn_has_bf16", lambda native=native: native)
        assert packing.prompt_weights("q4", torch.bfloat16) == ("dense" if native else "q4")
        assert packing.prompt_weights("int8", torch.bfloat16) == "dense"
        assert packing.prompt_weights("dense", torch.float32) == "dense"


def test_bf16_is_native_only_where_pytorchs_products_use_it(monkeypatch, tmp_path):
    """A CPU with AVX512-BF16 whose oneDNN is held to AVX2 (ONEDNN_MAX_CPU_ISA) multiplies bf16 as an AVX2 CPU
    does, emulated: dense weights and the embedder then stay in float32 there too."""
    (tmp_path / "xeon").write_text(XEON_AMX)
    xeon = cpu_features(tmp_path / "xeon")
    monkeypatch.setattr(hardware, "cpu_features", lambda: xeon)
    for held in (False, True):
        monkeypatch.setattr(hardware, "onednn_has_bf16", lambda held=held: not held)
        assert native_bf16() is not held
        assert pick_dtype("auto", "cpu") == (torch.float32 if held else torch.bfloat16)
        assert pick_dtype("auto", "cpu", integer_weights=True) == torch.bfloat16
        assert embedding_dtype_for("auto") == ("float32" if held else "bfloat16")
