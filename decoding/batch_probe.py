"""Whether a reply's logits depend on who shares its forward: the check behind sharing forwards at all.

A shared forward stacks several replies' W-wide blocks into one product per layer. oneDNN may pick another
blocking, and so another summation order, for another row count, and then a row's last bits would depend on
how many replies were served at once. This probe runs blocks alone and stacked in every count from 1 to
`max_lanes` and every position, and compares each lane's logits bit for bit. Measured on an Intel Xeon with
AVX512-BF16 and no AMX (1 and 2 threads, 4..256 rows): no row changed, tiny models and the bundled SmolLM2,
fp32 and bf16. Cost at start: max_lanes alone and max_lanes - 1 shared forwards of at most max_lanes * W rows.

The same question for one reply decides whether short blocks need padding to W at all
(`short_blocks_keep_their_bits`): a row is compared in a block of k < W rows and padded to W.
"""

import random
import weakref
from dataclasses import dataclass, replace

import torch

from .packed import KvCache, Lane, PackedLlama

PROBE_CACHE_LEN = 256
# Verdicts per loaded model and weight format, so that a model packed again (the format choice, services opened
# again in tests and the bench) is probed once.
_verdicts: "weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple, bool]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Mismatch:
    """A lane whose logits in a shared forward were not bit-identical to its logits alone."""

    lanes: int  # how many lanes shared the forward
    position: int  # where in the stack this lane was


def rows_keep_their_bits(model: PackedLlama, width: int, max_lanes: int, short_lanes: bool = False) -> bool:
    """Whether sharing forwards among up to `max_lanes` replies leaves every row's logits as they are alone
    (with `short_lanes`, replies whose blocks hold 1..W rows, as unpadded steps give)."""
    verdicts = _verdicts.setdefault(model.source, {})
    key = ("shared", model.packing, width, max_lanes, short_lanes)
    if key not in verdicts:
        verdicts[key] = not shared_forward_mismatches(
            model, width, max_lanes, every_position=False, short_lanes=short_lanes
        )
    return verdicts[key]


def short_blocks_keep_their_bits(model: PackedLlama, width: int) -> bool:
    """Whether a block of fewer than `width` inputs, run as it is, gives each row the bits it gets padded to
    `width`: then short blocks need no padding (StepConfig.padded) and a greedy step costs one row, not W."""
    verdicts = _verdicts.setdefault(model.source, {})
    key = ("short", model.packing, width)
    if key not in verdicts:
        # Each trial checks every length below W, so wide blocks need fewer: about 1 s at W = 16 (int4, 2 threads).
        verdicts[key] = not short_block_mismatches(model, width, trials=max(2, 32 // width))
    return verdicts[key]


@torch.inference_mode()
def short_block_mismatches(model: PackedLlama, width: int, trials: int = 16, seed: int = 0) -> list[int]:
    """The row counts k < `width` at which the first k rows of a block, run alone, differ from the same rows
    padded to `width`; each trial a random block on a random prompt. Measured on an Intel Xeon with AVX512-BF16
    and no AMX (the bundled SmolLM2, 40 positions, W = 2, 4, 8): the int8 and int4 kernels kept every row's
    bits; the dense bf16 oneDNN product did not (8-14 of 40), so dense steps stay padded there."""
    rng = random.Random(seed)
    vocab = model.embed.shape[0]
    mismatches = []
    for _ in range(trials):
        lane = _random_lane(model, rng, vocab, width, _prefilled_cache(model, rng))
        padded = model.forward_lanes([lane])[0]
        for k in range(1, width):
            short = model.forward_lanes([replace(lane, ids=lane.ids[:k])])[0]
            if not torch.equal(short, padded[:k]):
                mismatches.append(k)
    return sorted(set(mismatches))


@torch.inference_mode()
def shared_forward_mismatches(
    model: PackedLlama, width: int, max_lanes: int, seed: int = 0, every_position: bool = True,
    short_lanes: bool = False,
) -> list[Mismatch]:
    """Every (lane count, position) at which a block's logits in a shared forward differ from its logits alone.

    `every_position` puts every lane at every position of every count's stack (the tests); without it each count
    is one stack, rotated by the count so that lanes change places from count to count (the start-up check:
    max_lanes - 1 shared forwards instead of about max_lanes**2 / 2). With `short_lanes` each lane holds a
    random 1..W rows, so stacks of every row count are met."""
    rng = random.Random(seed)
    vocab = model.embed.shape[0]
    caches = [_prefilled_cache(model, rng) for _ in range(max_lanes)]
    sizes = [rng.randint(1, width) if short_lanes else width for _ in caches]
    lanes = [_random_lane(model, rng, vocab, size, cache) for size, cache in zip(sizes, caches, strict=True)]
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


def _prefilled_cache(model: PackedLlama, rng: random.Random) -> tuple[KvCache, int]:
    """A cache holding random keys and values for a random length, and that length. Random entries, not a
    prefill's: the probe asks whether the products' bits depend on the row count, which any keys show, and a
    prefill of up to 120 tokens cost 0.2 s each in int4 (16 of them at every start)."""
    cache = model.new_cache(PROBE_CACHE_LEN)
    length = rng.randrange(8, 120)
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    for entries in (*cache.keys, *cache.values):
        noise = torch.randn(entries[:, :, :length].shape, generator=generator)
        entries[:, :, :length] = noise.to(dtype=entries.dtype, device=entries.device)
    return cache, length


def _random_lane(model: PackedLlama, rng: random.Random, vocab: int, width: int, prefilled) -> Lane:
    cache, length = prefilled
    ids = torch.tensor([rng.randrange(vocab) for _ in range(width)], device=model.device)
    return Lane(ids, length, cache, key_len=min(PROBE_CACHE_LEN, -(-(length + width) // 64) * 64))
