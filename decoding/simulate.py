"""Replay LLMA against a known greedy reply, without the model, to tune copy policies in seconds.

Given the model's greedy reply, every verification outcome is known in advance: a draft is accepted
exactly as far as it equals that reply. The loop is the real one (`llma_steps`); only the verifier
differs, and the time is modelled with a measured cost curve.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .cost_curve import CostCurve
from .llma import DEFAULT_OPTIONS, LlmaOptions, llma_steps
from .policy import CopyPolicy
from .result import DecodeResult
from .steps import ONE_TOKEN_STEPS, UNKNOWN, StepConfig, verify_in_blocks


class ReplayVerifier:
    """Answers like the model, from the model's greedy reply; logs the size of each forward.

    Under a step width it checks drafts in W-wide blocks, stopping as the model verifier does.
    """

    def __init__(self, greedy_tokens: Sequence[int], steps: StepConfig = ONE_TOKEN_STEPS, prompt_len: int = 0) -> None:
        self.greedy = list(greedy_tokens)
        self.steps, self.prompt_len = steps, prompt_len
        self.produced = 0  # reply tokens chosen so far, the pending one included
        self.forward_sizes: list[int] = []
        self.forward_passes = 0
        self.prompt_reused = 0  # a replay runs no prefill

    def first_token(self) -> int:
        self.produced = 1
        self.forward_passes = 1
        return self.greedy[0]

    def verify(self, inputs: list[int], reply: Sequence[int] = ()) -> list[int]:
        """The replayed reply already holds the rule's choices, so `reply` changes nothing here."""
        answers = self._answers(inputs)
        done = 0

        def forward_block(block: list[int]) -> list[int]:
            nonlocal done
            self.forward_sizes.append(self.steps.width or len(block))
            self.forward_passes += 1
            done += len(block)
            return answers[done - len(block) : done]

        pending_position = self.prompt_len + self.produced - 1
        return verify_in_blocks(inputs, self.steps, pending_position, forward_block)

    def keep(self, n_inputs: int) -> None:
        self.produced += n_inputs

    def _answers(self, inputs: list[int]) -> list[int]:
        """What one forward over all of `inputs` would choose: known up to the first rejected draft token."""
        choices, draft = [], inputs[1:]
        for i in range(len(inputs)):
            position = self.produced + i
            agrees = i == 0 or draft[i - 1] == self.greedy[position - 1]
            if not agrees or position >= len(self.greedy):
                break
            choices.append(self.greedy[position])
        return choices + [UNKNOWN] * (len(inputs) - len(choices))


@dataclass(frozen=True)
class Simulation:
    result: DecodeResult
    forward_sizes: list[int]  # tokens per verification forward, prefill excluded
    modeled_seconds: float  # verification forwards priced with the cost curve
    modeled_greedy_seconds: float  # one one-token forward per reply token after the first

    @property
    def speedup(self) -> float:
        return self.modeled_greedy_seconds / self.modeled_seconds if self.modeled_seconds else 1.0


class ReplayDiverged(RuntimeError):
    """The replayed loop produced other tokens than the greedy reply it replays: the loop is broken."""


def simulate_llma(
    prompt_ids: Sequence[int],
    references: Sequence[Sequence[int]],
    greedy_tokens: Sequence[int],
    policy: CopyPolicy,
    cost: CostCurve,
    options: LlmaOptions = DEFAULT_OPTIONS,
    steps: StepConfig = ONE_TOKEN_STEPS,
) -> Simulation:
    """What LLMA with `policy` would do on this prompt, given the model's greedy reply (under the repetition
    rule in `options`, if any: the replayed loop stops and cuts by the same rule)."""
    if not greedy_tokens:
        raise ValueError("the greedy reply must hold at least one token")
    verifier = ReplayVerifier(greedy_tokens, steps, len(prompt_ids))
    result = DecodeResult()
    options = replace(options, max_new_tokens=len(greedy_tokens))
    for _ in llma_steps(verifier, prompt_ids, references, policy, options, result):
        pass
    if result.tokens != list(greedy_tokens):
        raise ReplayDiverged(f"replay gave {len(result.tokens)} tokens that differ from the greedy reply")
    modeled = sum(cost.cost(n) for n in verifier.forward_sizes)
    greedy = (len(greedy_tokens) - 1) * cost.cost(1)  # under a step width cost(1) is a W-wide step
    return Simulation(result, verifier.forward_sizes, modeled, greedy)
