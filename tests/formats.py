"""The dtype and weight format the tests run the bundled model in where they name one: what `make run` serves
on this CPU, at a cost the suite can afford.

Where bf16 products are native (AVX-512 BF16, AMX) or the CPU has no AVX2, that is the dtype `auto` picks with dense
weights, as before. Where bf16 is emulated (AVX2 without AVX-512), `auto` serves bf16 activations with q4 weights,
and dense bf16 there runs about 5x slower than q4 (docs/kernels/avx2.md): the tests take q4 too.
"""

import torch

from decoding.hardware import onednn_has_bf16, pick_dtype
from decoding.weights import q4_refusal

RUN_DTYPE = pick_dtype("auto", "cpu", integer_weights=True)
EMULATED_BF16 = RUN_DTYPE == torch.bfloat16 and not onednn_has_bf16() and q4_refusal() is None
RUN_WEIGHTS = "q4" if EMULATED_BF16 else "dense"
