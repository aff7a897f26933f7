"""Whether a reply's logits depend on who shares its forward: the check behind sharing forwards at all.

A shared forward stacks several replies' W-wide blocks into one product per layer. oneDNN may pick another
blocking, and so another summation order, for another row count, and then a row's last bits would depend on
how many replies were served at once. This probe runs blocks alone and stacked in every count from 1 to
`max_lanes` and every position, and compares each lane's logits bit for bit. Measured on an Intel Xeon with
AVX512-BF16 and no AMX (1 and 2 threads, 4..256 rows): no row changed, tiny models and the bundled SmolLM2,
fp32 and bf16. Cost at start: max_lanes alone and max_lanes - 1 shared forwards of at most max_lanes * W rows.
"""

import random
import weakref
from dataclasses import dataclass

import torch

from .packed import KvCache, Lane, PackedLlama

PROBE_CACHE_LEN = 256
# Verdicts per packed model, so that services opened again on one loaded model (tests, the bench) probe it once.
_verdicts: "weakref.WeakKeyDictionary[PackedLlama, dict[tuple[int, int], bool]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Mismatch:
    """A lane whose logits in a shared forward were not bit-identical to its logits alone."""

    lanes: int  # how many lanes shared the forward
    position: int  # where in the stack this lane was


def rows_keep_their_bits(model: PackedLlama, width: int, max_lanes: int) -> bool:
    """Whether sharing forwards among up to `max_lanes` replies leaves every row's logits as they are alone."""
    verdicts = _verdicts.setdefault(model, {})
    if (width, max_lanes) not in verdicts:
        verdicts[width, max_lanes] = not shared_forward_mismatches(model, width, max_lanes, every_position=False)
    return verdicts[width, max_lanes]


@torch.inference_mode()
def shared_forward_mismatches(
    model: PackedLlama, width: int, max_lanes: int, seed: int = 0, every_position: bool = True
) -> list[Mismatch]:
    """Every (lane count, position) at which a block's logits in a shared forward differ from its logits alone.

    `every_position` puts every lane at every position of every count's stack (the tests); without it each count
    is one stack, rotated by the count so that lanes change places from count to count (the start-up check:
    max_lanes - 1 shared forwards instead of about max_lanes**2 / 2)."""
    rng = random.Random(seed)
    vocab = model.embed.shape[0]
    caches = [_prefilled_cache(model, rng, vocab) for _ in range(max_lanes)]
    lanes = [_random_lane(model, rng, vocab, width, cache) for cache in caches]
    alone = [model.forward_lanes([lane])[0] for lane in lanes]
    mismatches = []
    for count in range(2, max_lanes + 1):
        for shift in range(count) if every_position else [count % max_lanes]:
            chosen = [(shift + j) % max_lanes for j in range(count)]
            shared = model.forward_lanes([lanes[k] for k in chosen])
            mismatches += [
                Mismatch(count, position) for position, (k, logits) in enumerate(zip(chosen, shared, strict=True))
                if not torch.equal(logits, alone[k])
            ]
    return mismatches


def _prefilled_cache(model: PackedLlama, rng: random.Random, vocab: int) -> tuple[KvCache, int]:
    """A cache holding a random prompt of random length, and that length."""
    cache = model.new_cache(PROBE_CACHE_LEN)
    length = rng.randrange(8, 120)
    ids = torch.tensor([rng.randrange(vocab) for _ in range(length)], device=model.device)
    model.forward(ids, 0, cache, 128, last_only=True)
    return cache, length


def _random_lane(model: PackedLlama, rng: random.Random, vocab: int, width: int, prefilled) -> Lane:
    cache, length = prefilled
    ids = torch.tensor([rng.randrange(vocab) for _ in range(width)], device=model.device)
    return Lane(ids, length, cache, key_len=min(PROBE_CACHE_LEN, -(-(length + width) // 64) * 64))
