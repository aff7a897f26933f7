"""Device and dtype chosen from a setting and what the hardware offers."""

import pytest
import torch

from decoding import cpu_features, pick_device, pick_dtype

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
    assert pick_dtype("auto", "cpu") == (torch.bfloat16 if cpu_features().has_bf16 else torch.float32)
    with pytest.raises(ValueError):
        pick_dtype("float16", "cpu")


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError):
        pick_device("tpu")
