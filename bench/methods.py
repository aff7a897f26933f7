"""The decoding methods the bench compares, and every call the bench makes into `decoding`.

Only this module imports `decoding`: when the engine's signatures change, the bench is adapted here alone.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bench.peers import LlamaCppGreedy
from chatbot.measure import credited_source
from chatbot.prompt import answer_places
from decoding import (
    AUTO,
    DEFAULT_PREFIX_CACHE_BYTES,
    NAMED_RULES,
    REPETITION_OFF,
    AdaptiveCopyPolicy,
    CostCurve,
    CpuFeatures,
    Engine,
    FixedCopyPolicy,
    LlmaOptions,
    RepetitionRule,
    StepConfig,
    StepWidth,
    cpu_features,
    greedy_generate,
    llma_generate,
    load_engine,
    load_model,
    may_hold_integer_weights,
    measure_cost_curve,
    pick_dtype,
)
from decoding.model_loading import bundled_gguf_path
from decoding.simulate import simulate_llma

METHODS = ("hf_greedy", "greedy", "hf_prompt_lookup", "llma_paper", "llma", "oracle")
LLMA_METHODS = ("llma_paper", "llma", "oracle")  # must reproduce greedy decoding exactly
# Other engines on the same model, run only with --peers. Their replies may differ from greedy's (other kernels,
# llama.cpp's int-quantized matmuls): a differing reply is recorded, never a losslessness mismatch.
PEER_METHODS = ("llamacpp_greedy",)
# Not a method: greedy decoding of a grounded question's plain prompt (no approved answer in it), the baseline
# of the end-to-end speedup. Its reply may differ from greedy's on the grounded prompt, and that is no mismatch.
PLAIN_GREEDY = "plain_greedy"
PAPER_POLICY = FixedCopyPolicy(match_len=1, copy_len=15)  # the paper's n=1, k=15
HF_PROMPT_LOOKUP_TOKENS = 10


@dataclass
class Decoded:
    tokens: list[int]
    copied_tokens: int | None  # None where the method does not report it
    copied_from_first_reference: int | None = None  # LLMA only: tokens copied from references[0]
    forward_passes: int | None = None  # the engine's own count; None: count transformers' forward calls


class ForwardCounter:
    """Counts the models' top-level forward calls: one per greedy step or per verification."""

    def __init__(self, *models: torch.nn.Module) -> None:
        self.count = 0
        for model in dict.fromkeys(models):  # the same model once
            model.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.count += 1


class Decoder:
    """Runs any method on a prompt with one model, budget and stop token; counts forward passes."""

    def __init__(
        self, engine: Engine, max_new_tokens: int, llma_policy: AdaptiveCopyPolicy, hf_model=None,
        peer: LlamaCppGreedy | None = None,
    ) -> None:
        self.engine = engine  # the forward and step width, decided once (decoding.engine)
        self.model = engine.model
        self.hf_model = hf_model if hf_model is not None else engine.model  # transformers' generate runs on this
        self.tokenizer = engine.tokenizer
        self.eos_token_id = engine.tokenizer.eos_token_id
        self.max_new_tokens = max_new_tokens
        self.llma_policy = llma_policy
        self.step_width = engine.step_width
        self.repetition = REPETITION_OFF  # the decoding rule greedy and LLMA share; hf_* run plain greedy
        self.step_costs: list[dict] = []
        self.forwards = ForwardCounter(self.hf_model)  # the engine counts its own forwards
        self.peer = peer  # shared by copies of the decoder (the warm-up's), so it loads once

    @classmethod
    def load(
        cls, max_new_tokens: int, peers: bool = False, dtype_setting: str = "auto", width_setting: str = "auto",
        weights_setting: str = "auto",
        step_costs: bool = True,
    ) -> "Decoder":
        """The bundled model as `make run` runs it on this machine (the packed forward, bfloat16 where the CPU has
        bf16 kernels, W-wide steps of the measured width; the settings override dtype and width), transformers'
        generate on an fp32 copy (its fastest dtype on a CPU), and the adaptive
        policy on the engine's cost curve (measured now, before any timing). With `peers`, llama.cpp on the
        GGUF file the engine's weights were dequantized from, with the bench's torch threads. `step_costs`: the
        table of the engine's step beside other widths and kernels (tens of seconds on a slow CPU)."""
        peer = LlamaCppGreedy(bundled_gguf_path(), torch.get_num_threads()) if peers else None  # fails fast
        integer = may_hold_integer_weights(weights_setting, StepWidth.parse(width_setting))
        dtype = pick_dtype(dtype_setting, "cpu", integer)
        # auto: measured now, as at a deployment's first start
        # No prompt chunks kept: each method prefills its prompt itself, or the one timed second would reuse the
        # first one's chunks and look faster than it is.
        engine = load_engine(dtype=dtype, width=StepWidth.parse(width_setting), weights=weights_setting,
                             prefix_cache_bytes=0)
        hf_model = engine.source if dtype == torch.float32 else load_model(dtype=torch.float32)[0]
        torch.manual_seed(0)
        steps = engine.steps(256, max_new_tokens)
        curve = measure_cost_curve(engine.model, steps=steps)
        decoder = cls(engine, max_new_tokens, AdaptiveCopyPolicy(cost=curve), hf_model, peer)
        decoder.step_costs = compare_step_costs(engine, hf_model, steps, curve) if step_costs else []
        return decoder

    def steps(self, prompt_ids: list[int]) -> StepConfig:
        """The decode step shape for this prompt: the same for every method of the engine, as in the service."""
        return self.engine.steps(len(prompt_ids), self.max_new_tokens)

    def decode(
        self, method: str, prompt_ids: list[int], references: list[list[int]], greedy_tokens: list[int]
    ) -> Decoded:
        """One method on one prompt; `greedy_tokens` is the oracle's reference."""
        match method:
            case "hf_greedy":
                return self.hf(prompt_ids)
            case "hf_prompt_lookup":  # sees the prompt only: references are not part of it
                return self.hf(prompt_ids, prompt_lookup_num_tokens=HF_PROMPT_LOOKUP_TOKENS)
            case "greedy":
                return self.greedy(prompt_ids)
            case "llma_paper":
                return self.llma(prompt_ids, references, PAPER_POLICY)
            case "llma":
                return self.llma(prompt_ids, references, self.llma_policy)
            case "oracle":
                return self.llma(prompt_ids, [greedy_tokens], self.llma_policy)
            case "llamacpp_greedy":
                return self.llamacpp(prompt_ids)
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS + PEER_METHODS)}")

    def hf(self, prompt_ids: list[int], **options) -> Decoded:
        ids = torch.tensor([prompt_ids])  # (1, T)
        out = self.hf_model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens, do_sample=False,
            eos_token_id=self.eos_token_id, pad_token_id=self.eos_token_id, **options,
        )  # (1, T + new)
        return Decoded(out[0, len(prompt_ids) :].tolist(), copied_tokens=None)

    def greedy(self, prompt_ids: list[int]) -> Decoded:
        steps = self.steps(prompt_ids)
        result = greedy_generate(self.model, prompt_ids, self.max_new_tokens, self.eos_token_id, steps=steps,
                                 repetition=self.repetition)
        return Decoded(result.tokens, copied_tokens=0, forward_passes=result.forward_passes)

    def llma(self, prompt_ids: list[int], references: list[list[int]], policy) -> Decoded:
        options = LlmaOptions(self.max_new_tokens, self.eos_token_id, repetition=self.repetition)
        result = llma_generate(self.model, prompt_ids, references, policy, options, steps=self.steps(prompt_ids))
        return Decoded(result.tokens, result.copied_tokens, self.copied_from_first(prompt_ids, references, result),
                       result.forward_passes)

    def copied_from_first(self, prompt_ids: list[int], references: list[list[int]], result) -> int:
        """Tokens copied from the first reference (a grounded question's approved answer), from its places in the
        prompt too, as the chat service credits them (chatbot/measure.py)."""
        first = list(references[0]) if references else []
        if first and first[-1] == self.eos_token_id:
            first = first[:-1]
        places = {0: answer_places(prompt_ids, first)}
        return sum(run.length for run in result.copied_runs if credited_source(run, places) == 0)

    def llamacpp(self, prompt_ids: list[int]) -> Decoded:
        """llama.cpp's greedy on the same prompt ids: one forward per token, the prefill included."""
        if self.peer is None:
            raise ValueError("llamacpp_greedy runs only on a decoder loaded with peers (python -m bench --peers)")
        tokens = self.peer.generate(prompt_ids, self.max_new_tokens, self.eos_token_id)
        return Decoded(tokens, copied_tokens=0, forward_passes=len(tokens))

    def fixed(self, prompt_ids: list[int], references: list[list[int]], match_len: int, copy_len: int) -> Decoded:
        """LLMA with the paper's fixed policy at other n (match_len) and k (copy_len): one cell of the grid."""
        return self.llma(prompt_ids, references, FixedCopyPolicy(match_len=match_len, copy_len=copy_len))

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    # --- what results.json records about the model and the policies ---

    @property
    def model_id(self) -> str:
        return Path(self.model.config.name_or_path).name

    @property
    def dtype(self) -> str:
        return str(next(self.model.parameters()).dtype)

    @property
    def forward(self) -> str:
        return self.engine.forward

    @property
    def weights(self) -> str:
        return self.engine.weights

    @property
    def padded_steps(self) -> bool:
        return self.engine.padded_steps

    @property
    def lane_head(self) -> bool:
        return self.engine.lane_head

    @property
    def hf_dtype(self) -> str:
        return str(next(self.hf_model.parameters()).dtype)

    @property
    def peer_version(self) -> str:
        """llama-cpp-python's version when the run has peers, else empty."""
        return self.peer.version if self.peer else ""

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def llma_policy_json(self) -> dict:
        return {key: v for key, v in asdict(self.llma_policy).items() if key != "cost"}

    def cost_curve_json(self) -> dict:
        """The forward costs the adaptive policy plans with (CostCurve's fields)."""
        return self.llma_policy.cost.to_json()


def compare_step_costs(engine: Engine, fp32_model, steps: StepConfig, curve: CostCurve) -> list[dict]:
    """The engine's step (`curve`: its cost curve, measured for the policy) next to forwards of other widths and
    kernels, over a 256-token cache.

    Rows: the engine's W-wide step; the same forward at 1..16 rows (how flat it is); transformers' forward of
    the same weights; transformers' forward in fp32 (what `hf_greedy` runs).
    """
    sizes = (1, 2, 4, 8, 16)
    model, dtype = engine.model, str(engine.dtype).removeprefix("torch.")
    packed = engine.recipe.forward == "packed"
    costs = []
    if steps.width:
        shape = f"{steps.width}-wide steps" + ("" if steps.padded else ", short ones unpadded")
        label = f"{dtype}, {engine.recipe.forward}, {shape} (this engine)"
        costs.append(_cost_row(label, curve.sizes, curve.seconds))
    if packed:
        seconds = [measure_cost_curve(model, steps=StepConfig(n, steps.cache_len)).seconds[0] for n in sizes]
        costs.append(_cost_row(f"{dtype}, packed, one forward of n rows", sizes, seconds))
    source = engine.source
    own = measure_cost_curve(source, sizes=sizes)
    costs.append(_cost_row(f"{dtype}, transformers, one-token / variable-width", own.sizes, own.seconds))
    if fp32_model is not source:
        fp32 = measure_cost_curve(fp32_model, sizes=sizes)
        costs.append(_cost_row("float32, transformers, one-token / variable-width", fp32.sizes, fp32.seconds))
    return costs


def _cost_row(label: str, sizes, seconds) -> dict:
    return {"label": label, "sizes": list(sizes), "ms": [round(s * 1000, 1) for s in seconds]}


def processor() -> CpuFeatures:
    """The CPU model and the flags that choose its fast kernels, for the report."""
    return cpu_features()


def paper_policy_json() -> dict:
    return asdict(PAPER_POLICY)


# --- the offline replay the policy tuner prices policies with ---


def cost_curve(sizes: tuple[int, ...], seconds: tuple[float, ...]) -> CostCurve:
    return CostCurve(sizes, seconds)


def adaptive_policy(curve: CostCurve, **priors) -> AdaptiveCopyPolicy:
    """The adaptive policy with other priors (prior_by_match_len, prior_continuing, ...); defaults where not given."""
    return AdaptiveCopyPolicy(curve, **priors)


def paper_policy() -> FixedCopyPolicy:
    return PAPER_POLICY


@dataclass(frozen=True)
class Replay:
    """What LLMA would cost on one recorded prompt, priced with a cost curve instead of timed."""

    modeled_seconds: float
    modeled_greedy_seconds: float
    speedup: float


def replay(prompt_ids: list[int], references: list[list[int]], greedy_tokens: list[int], policy, curve: CostCurve,
           eos_token_id: int) -> Replay:
    """LLMA's decisions on a prompt whose greedy reply is known, without the model."""
    sim = simulate_llma(prompt_ids, references, greedy_tokens, policy, curve, LlmaOptions(eos_token_id=eos_token_id))
    return Replay(sim.modeled_seconds, sim.modeled_greedy_seconds, sim.speedup)


# --- the quality run (bench/quality.py): the engine as `make run` builds it, and the decoding rules it compares ---

RULES = NAMED_RULES  # "off": plain greedy; "dry": the app's default rule


def app_engine(weights: str = "auto", prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> Engine:
    """The bundled model as `make run` runs it on this machine: its dtype, the packed forward, a measured weight
    format and width. `prefix_cache_bytes=0` where a reply and its greedy rerun are timed against each other."""
    dtype = pick_dtype("auto", "cpu", may_hold_integer_weights(weights, AUTO))
    return load_engine(dtype=dtype, width=AUTO, weights=weights, prefix_cache_bytes=prefix_cache_bytes)


def decoding_rule(name: str) -> RepetitionRule:
    if name not in RULES:
        raise ValueError(f"unknown decoding rule {name!r}; choose from {', '.join(RULES)}")
    return RULES[name]
