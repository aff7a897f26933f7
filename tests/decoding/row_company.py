"""A product's rows alone against the same rows in company: the check behind the lane library's products."""

import random
from collections.abc import Callable

import torch


def bits(values: torch.Tensor) -> torch.Tensor:
    """bf16 or fp32 values as their bits, so NaNs and zeros' signs compare too."""
    return values.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}[values.dtype])


def rows_alone_and_company_mismatches(product: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                                      rng: random.Random, rounds: int = 20) -> tuple[torch.Tensor, list]:
    """Each row of `x` through `product` alone, and where its bits differ from that: `rounds` random companies of
    2..len(x) rows in any order (across a kernel's row blocks), and all rows on one thread ("one thread")."""
    alone = torch.cat([product(x[i : i + 1]) for i in range(len(x))])
    mismatches: list = []
    for _ in range(rounds):
        picks = rng.sample(range(len(x)), rng.randint(2, len(x)))
        if not torch.equal(bits(product(x[picks])), bits(alone[picks])):
            mismatches.append(picks)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = product(x)
    finally:
        torch.set_num_threads(threads)
    if not torch.equal(bits(one_thread), bits(alone)):
        mismatches.append("one thread")
    return alone, mismatches
