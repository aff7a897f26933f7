"""What one verification forward pass costs, by the number of tokens it checks, and the rules that choose by it
(pure: no torch; decoding/cost_model.py measures).

On a CPU the fixed overhead of a forward dominates: checking 16 tokens costs about twice one.
The adaptive copy policy weighs the expected accepted tokens against this curve. Under a step width W
every decode forward is W wide, so the curve is flat up to W and steps up by one forward per W tokens;
where short blocks run unpadded (StepConfig.padded) it rises with the rows up to W.
"""

import math
from dataclasses import asdict, dataclass, replace

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64)
STEP_WIDTHS = (16, 8, 4, 2)  # the widest whose forward is nearly as cheap as one token's is chosen
FLAT_TOLERANCE = 1.2  # "nearly": at most 20% dearer than a one-token forward of the same kind
# Where short blocks run unpadded, a step costs only the rows its block holds and the width only caps a draft, so
# steps are this wide even where wide forwards are dear (the copy policy weighs each draft's rows). Measured on
# the AMD EPYC, int4 (`python -m bench --workloads repeat,grounded,followup,novel --methods greedy,llma --limit 5
# --max-new-tokens 64 --step-width 2|8`, alternately, twice): LLMA over greedy 2.59-2.67x on repeats against
# 1.49-1.53x at W = 2, follow-ups 1.54-1.72x against 1.33-1.40x, novel questions 1.01-1.08x against 1.06-1.07x.
UNPADDED_WIDTH = 8


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one forward pass of `sizes[i]` new tokens over a warm KV cache.

    With `step_width` W the engine pads every forward to W tokens: `sizes` is (W,) and n tokens cost
    ceil(n / W) forwards.
    """

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    context_len: int = 256
    step_width: int | None = None
    padded: bool = True  # with a step width: False when short blocks run unpadded, `sizes` then 1.. up to W

    def cost(self, n_tokens: int) -> float:
        """Seconds for a forward of n_tokens, interpolated linearly between measured sizes."""
        n_tokens = max(n_tokens, 1)
        if self.step_width is None:
            return self._interpolated(n_tokens)
        if self.padded:
            return math.ceil(n_tokens / self.step_width) * self.seconds[-1]
        full, rest = divmod(n_tokens, self.step_width)  # full-width forwards, then one of the rest's rows
        return full * self._interpolated(self.step_width) + (self._interpolated(rest) if rest else 0.0)

    def _interpolated(self, n_tokens: int) -> float:
        sizes, secs = self.sizes, self.seconds
        if n_tokens <= sizes[0]:
            return secs[0]
        for i in range(1, len(sizes)):
            if n_tokens <= sizes[i]:
                share = (n_tokens - sizes[i - 1]) / (sizes[i] - sizes[i - 1])
                return secs[i - 1] + (secs[i] - secs[i - 1]) * share
        slope = (secs[-1] - secs[-2]) / (sizes[-1] - sizes[-2])
        return secs[-1] + slope * (n_tokens - sizes[-1])

    def relative(self, n_tokens: int) -> float:
        """Cost of a forward of n_tokens in units of a one-token step."""
        return self.cost(n_tokens) / self.cost(1)

    def in_company(self, share: float) -> "CostCurve":
        """This reply's costs in a shared forward where its share of the time is `share` x a lone one-token step.

        Sharing spreads the forward's fixed cost over the replies, but a draft's extra rows still cost every reply
        sharing it their full price: relative to this reply's share, they weigh 1 / share times as much (measured
        on the AMD EPYC, int4, 8 replies: ~7 ms a reply against 15 ms alone, so a draft must be accepted about
        twice as often to pay)."""
        if share >= 1.0 or self.step_width is None or self.padded:
            return self  # alone, or padded blocks, whose rows cost the same drafted or not
        one = self._interpolated(1)
        return replace(self, seconds=tuple(one + (s - one) / share for s in self.seconds))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "CostCurve":
        width = data.get("step_width")
        return cls(
            tuple(data["sizes"]), tuple(data["seconds"]), int(data.get("context_len", 256)), width,
            bool(data.get("padded", True)),
        )


def widest_flat_width(seconds: dict[int, float]) -> int:
    """The widest of STEP_WIDTHS whose forward (`seconds` by width, 1 included) costs at most FLAT_TOLERANCE x a
    one-token forward, and at least the narrowest."""
    flat = [width for width in STEP_WIDTHS if seconds[width] <= FLAT_TOLERANCE * seconds[1]]
    return max(flat) if flat else min(STEP_WIDTHS)


COMPANY = (8, 2)  # replies x rows each: a full shared forward (DEFAULT_MAX_SLOTS), a greedy step and a draft's row


def format_seconds(step_seconds: float, company_seconds: float) -> float:
    """What choose_weights compares across formats: the format's chosen step, plus its share of a busy helpdesk's
    shared forward of COMPANY's replies."""
    return step_seconds + company_seconds / COMPANY[0]
