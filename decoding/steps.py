"""The shape of every decode forward after the prefill, and verification of a draft in fixed-width blocks.

Kernels may round a row differently depending on how many rows a forward holds, so in bfloat16 checking a
draft in one forward can choose another token than a one-token step would at a near-tie. With a fixed
width W every decode forward holds exactly W tokens (a greedy step pads its one token, a verification pads
its draft), so a position's logits do not depend on which kind of step computed them, and LLMA equals
this engine's greedy by construction -- wherever the kernels treat every row of a W-block alike, which
tests/decoding/test_invariance.py checks bit for bit. Where a start-up probe shows that a row's bits do not
depend on the block's row count either (the int weight kernels), short blocks run unpadded.
"""

from collections.abc import Callable
from dataclasses import dataclass

UNKNOWN = -1  # the model's choice after a rejected draft token: never looked at


@dataclass(frozen=True)
class StepConfig:
    """How wide each decode forward is; greedy and LLMA must be given the same one to be comparable.

    width None: a greedy step feeds one token and a verification the pending token plus its draft.
    width W: every decode forward feeds exactly W tokens, padded; longer drafts take several forwards, and
    the KV cache is preallocated for `cache_len` positions. Attention then always spans `cache_len` keys,
    the unused ones masked: a row's sums run over the same length wherever it sits, which a cache that
    grows does not give (fp32 GEMMs and SDPA pick their blocking by length).
    """

    width: int | None = None
    cache_len: int = 2048  # prompt + reply + W must fit; only used with a width
    # The packed forward attends a block over keys up to the next multiple of key_granule past its first
    # position, not over the whole cache, and blocks never cross such a multiple: every row then attends over
    # the same number of keys in whichever block computes it (SDPA's sums change with the key count), while
    # attention costs what the context holds, not what the cache could.
    key_granule: int = 64
    # Whether a block of fewer than W inputs (a greedy step, a short draft) is padded to W. Unpadded only where
    # it was measured at start that a row gets the same bits in a shorter block (decoding/batch_probe.py; the
    # int8 and int4 kernels on the Xeons): a greedy step then costs one row, not W.
    padded: bool = True
    # How the packed forward feeds the prompt: in chunks of this many tokens starting at its multiples (the last
    # one shorter; see prefill_break), each chunk attending over the keys up to its own end; None: the whole prompt
    # in one forward (every reply before chunks). A chunk's keys and values are then a function of the tokens up to
    # its end and the chunks they were cut into alone, whatever the prompt's length, the cache's size or the
    # tokens after it, so a chunk computed for one prompt serves every prompt that starts with the same tokens
    # (decoding/prefix_cache.py) without changing a bit; and a long prompt's prefill can give way to other
    # replies' steps between its chunks. 64-token chunks cost 7% more than one forward for a 704-token prompt
    # (756 vs 704 ms, AMD EPYC, dense bf16).
    prefill_chunk: int | None = None
    # Whether a block may cross a key granule: where decode steps attend through the lane kernel, each row attends
    # over exactly the keys at or before its position whatever the key count (decoding/csrc), so the granule only
    # split a draft into two forwards where it crossed one (some 2 in 19 forwards of a copied 128-token reply).
    cross_granules: bool = False
    # Where the prompt's shared beginning ends (the messages before the conversation: system prompt, article,
    # approved answers), 0 for none: chunks stop there and start again from it. The beginning's last chunk is then
    # a chunk of its own, kept in the prefix cache like a full one, and only the conversation after it is prefilled
    # for each question, instead of the beginning's tail that did not fill a chunk as well (some 40 tokens of a
    # grounded prompt). A function of the prompt alone, stored with each reply so that Verify chunks alike.
    prefill_break: int = 0

    def __post_init__(self) -> None:
        if self.width is not None and not 1 <= self.width <= self.cache_len:
            raise ValueError("step width must be at least 1 and at most cache_len")
        if self.prefill_chunk is not None and (self.prefill_chunk < 1 or self.prefill_chunk % self.key_granule):
            raise ValueError(f"prefill chunks must be a positive multiple of {self.key_granule} tokens")
        if self.prefill_break < 0:
            raise ValueError("the prefill break must not be negative")

    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        """Refuse a call whose prompt and reply would overflow the preallocated cache."""
        if self.width is not None and prompt_len + max_new_tokens + self.width > self.cache_len:
            raise ValueError(
                f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) + step width ({self.width}) "
                f"exceed the KV cache of {self.cache_len} positions"
            )

    def block_len(self, position: int) -> int:
        """How many inputs the forward starting at `position` takes: W, or fewer so as not to cross a granule."""
        if self.cross_granules:
            return self.width
        return min(self.width, self.key_granule - position % self.key_granule)

    def prefill_chunks(self, prompt_len: int) -> list[tuple[int, int]]:
        """(start, end) of each forward that feeds a prompt of `prompt_len` tokens: chunks at multiples of the
        chunk size up to the prefill break, then chunks from the break on."""
        chunk = self.prefill_chunk or prompt_len
        cut = self.prefill_break if self.prefill_chunk and 0 < self.prefill_break < prompt_len else prompt_len
        return _chunks(0, cut, chunk) + _chunks(cut, prompt_len, chunk)

    def kept_chunk(self, start: int, end: int) -> bool:
        """Whether the prefill chunk start..end goes into the prefix cache: a full one, or the beginning's last."""
        return self.prefill_chunk is not None and (end - start == self.prefill_chunk or end == self.prefill_break)

    def key_len(self, position: int) -> int:
        """How many keys a block starting at `position` attends over (its granule's end)."""
        return min(self.cache_len, (position // self.key_granule + 1) * self.key_granule)

    def pad(self, block: list[int]) -> list[int]:
        """`block` padded to the step width by repeating its last token (padding's KV entries are dropped);
        as it is with one-token or unpadded steps."""
        if self.width is None or not self.padded:
            return block
        return block + [block[-1]] * (self.width - len(block))


def _chunks(start: int, end: int, size: int) -> list[tuple[int, int]]:
    return [(first, min(end, first + size)) for first in range(start, end, size)]


ONE_TOKEN_STEPS = StepConfig()
CACHE_GRANULE = 256  # preallocated caches come in multiples of this, so nearby prompt lengths share one shape
PREFILL_CHUNK = 64  # one key granule (StepConfig.prefill_chunk)


def sized_steps(
    width: int | None, prompt_len: int, max_new_tokens: int, padded: bool = True, prefill_chunk: int | None = None,
    cross_granules: bool = False, prefill_break: int = 0,
) -> StepConfig:
    """Steps of `width` with a cache just big enough for this prompt and reply budget, rounded up.

    Attention spans the whole preallocated cache, so a small cache is faster (a 512-position cache made a
    bf16 step 30% cheaper than a 2048-position one). Greedy and LLMA on one prompt and budget get the same
    size, so they stay bit-comparable.
    """
    if width is None:
        return ONE_TOKEN_STEPS
    needed = prompt_len + max_new_tokens + width
    return StepConfig(width, -(-needed // CACHE_GRANULE) * CACHE_GRANULE, padded=padded, prefill_chunk=prefill_chunk,
                      cross_granules=cross_granules, prefill_break=prefill_break if prefill_chunk else 0)


def verify_in_blocks(
    inputs: list[int], steps: StepConfig, start: int, forward_block: Callable[[list[int]], list[int]]
) -> list[int]:
    """The greedy choice after each of `inputs` (the pending token at position `start`, then the draft),
    at most W inputs per forward and never across a key granule.

    A block is fed only while every draft token so far equals the choice before it; past the first
    disagreement the choices are UNKNOWN (or whatever the last block made of the rejected tokens).
    """
    if steps.width is None:
        return forward_block(inputs)
    choices: list[int] = []
    while len(choices) < len(inputs) and inputs[1 : len(choices) + 1] == choices:
        done = len(choices)
        choices += forward_block(inputs[done : done + steps.block_len(start + done)])
    return choices + [UNKNOWN] * (len(inputs) - len(choices))
