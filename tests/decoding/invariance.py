"""Bitwise comparison of a position's logits as row 0 of a padded greedy step and as row j of a verification block."""

import torch
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from decoding.runners import open_runner
from decoding.steps import StepConfig

CONFIGS = {
    "llama": LlamaConfig,
    "mistral": MistralConfig,
    "qwen2": Qwen2Config,
    "qwen3": Qwen3Config,
    "gemma": GemmaConfig,
    "phi3": Phi3Config,
}
VOCAB = 160


def make_tiny_model(arch: str, dtype: torch.dtype, seed: int = 0, **overrides) -> torch.nn.Module:
    """A 2-layer random model of `arch`, hidden 64, in `dtype`; `overrides` change its config."""
    torch.manual_seed(seed)
    sizes = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,  # inside the small vocabulary
    )
    config = CONFIGS[arch](**{**sizes, **overrides})
    if arch == "mistral" and "sliding_window" not in overrides:
        config.sliding_window = None  # a 4096-token window never slides here; test_sliding_window sets a small one
    return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


@torch.inference_mode()
def greedy_step_logits(model, ids: list[int], prompt_len: int, steps: StepConfig) -> list[torch.Tensor]:
    """Logits (V,) after each of ids[prompt_len:], each as row 0 of a padded one-token step."""
    runner = open_runner(model, steps)
    runner.prefill(ids[:prompt_len])
    rows = []
    for p in range(prompt_len, len(ids)):
        rows.append(runner.step([ids[p]])[0])
        runner.truncate(p + 1)
    return rows


@torch.inference_mode()
def block_logits(model, ids: list[int], prompt_len: int, steps: StepConfig, shift: int) -> list[torch.Tensor]:
    """The same logits from W-wide verification blocks of real tokens, after `shift` one-token steps.

    Shifts 0..W-1 put every position at every row j of a block; blocks are cut at key granules, as the engine's.
    """
    runner = open_runner(model, steps)
    runner.prefill(ids[:prompt_len])
    rows: list[torch.Tensor] = []
    start = prompt_len
    while start < len(ids):
        block = ids[start : start + (1 if start < prompt_len + shift else steps.block_len(start))]
        rows.extend(runner.step(block))
        start += len(block)
        runner.truncate(start)
    return rows


def differing_positions(
    model, ids: list[int], prompt_len: int, steps: StepConfig, shifts: range | None = None
) -> list[tuple[int, int]]:
    """(position, row) wherever a block row's logits are not bit-identical to the greedy step's.

    Every shift puts every position at another row; `shifts` may take some of them only: each still puts every
    row j of a block on many positions, so every row is checked, on fewer (position, row) pairs."""
    greedy = greedy_step_logits(model, ids, prompt_len, steps)
    differing = []
    for shift in shifts if shifts is not None else range(steps.width):
        rows = block_logits(model, ids, prompt_len, steps, shift)
        for i, (ours, theirs) in enumerate(zip(rows, greedy, strict=True)):
            if not torch.equal(ours, theirs):
                differing.append((prompt_len + i, (i - shift) % steps.width if i >= shift else 0))
    return differing
