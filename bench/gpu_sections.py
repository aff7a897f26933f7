"""The GPU check's shapes, plans and sections (bench/gpu_check.py runs them and writes the report)."""


import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from decoding import (
    AdaptiveCopyPolicy,
    CopyPolicy,
    DecodeResult,
    Engine,
    FixedCopyPolicy,
    LlmaOptions,
    Scheduler,
    Sharing,
    StepConfig,
    StepWidth,
    build_engine,
    greedy_generate,
    llma_generate,
    measure_cost_curve,
    scheduled_greedy,
    scheduled_llma_stream,
)
from decoding.cost_model import measure_company
from decoding.hardware import synchronize
from decoding.threads import run_at_once

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_CONFIG = ROOT / "models" / "SmolLM2-135M-Instruct" / "config.json"
WIDTHS = ("auto", "4", "8", "16")
POLICIES = {"fixed 1/15": FixedCopyPolicy(1, 15), "fixed 2/4": FixedCopyPolicy(2, 4)}  # the paper's n/k; a timid one
PROMPT_LOOKUP_TOKENS = 10  # transformers' prompt lookup, as bench/methods.py runs it
PERTURB_EVERY = 8  # the perturbed reference: the oracle with every 8th token changed
WAIT_S = 300.0  # bounds a broken scheduler's wait; a whole round takes seconds
SECTIONS = ("engines", "identity", "shared_forwards", "forward_cost", "speed", "concurrency")
# The bar on the 1.1B shape: (ratio measured in speed or concurrency, at least).
TARGETS = (("greedy_vs_generate", 2.0), ("llma_oracle_vs_greedy", 3.0), ("concurrent_vs_one_by_one", 4.0))


@dataclass(frozen=True)
class Shape:
    """A Llama model's size; its weights are drawn from a seed."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int

    def config(self) -> LlamaConfig:
        # Normal weights of std 1/sqrt(hidden): logits spread about 1 apart, far above bf16's rounding. Untied
        # head: with the embedding as head a random model's argmax is the token it was fed, so greedy repeats it.
        return LlamaConfig(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096, initializer_range=self.hidden**-0.5, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=None, pad_token_id=0,
        )


def smollm2_shape() -> Shape:
    """The bundled SmolLM2-135M's shape, from its config where the model folder is here."""
    if BUNDLED_CONFIG.exists():
        c = json.loads(BUNDLED_CONFIG.read_text())
        return Shape("smollm2-135m", c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                     c["num_key_value_heads"], c["intermediate_size"], c["vocab_size"])
    return Shape("smollm2-135m", 576, 30, 9, 3, 1536, 49152)


SHAPES = {
    shape.name: shape for shape in (
        Shape("llama-1.1b", 2048, 22, 32, 4, 5632, 32000),  # TinyLlama's shape
        smollm2_shape(),
        Shape("llama-7b", 4096, 32, 32, 32, 11008, 32000),  # only when asked for (--shapes)
        Shape("tiny", 64, 2, 4, 2, 128, 512),  # the dry run's
    )
}


@dataclass(frozen=True)
class Plan:
    """Where and how much to decode."""

    device: str
    dtype: torch.dtype
    shapes: tuple[str, ...]  # the 1.1B first: the bar is set on it, and the time guard cuts the last
    prompt_len: int  # random token ids per prompt
    new_tokens: int  # every reply's budget (no EOS: random models would stop anywhere)
    prompts: int  # prompts per width in identity, per method in speed
    repeats: int  # timed runs per method and prompt, the fastest counted
    replies: int = 8
    rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    keys: tuple[int, ...] = (256, 1024)


GPU_PLAN = Plan("cuda", torch.bfloat16, ("llama-1.1b", "smollm2-135m"), prompt_len=200, new_tokens=128, prompts=2,
                repeats=2)
DRY_PLAN = Plan("cpu", torch.float32, ("tiny",), prompt_len=40, new_tokens=24, prompts=1, repeats=1)


class Deadline:
    """The time guard: sections and their loops stop once `seconds` have passed since it was made."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.end


@dataclass
class ShapeRun:
    """One shape's model, its engines by width setting, and the random prompts every section decodes."""

    plan: Plan
    shape: Shape
    model: torch.nn.Module
    deadline: Deadline
    engines: dict[str, Engine] = field(default_factory=dict)

    def engine(self, width: str) -> Engine:
        """The engine at `width` ("auto" or W), built on first use; no prompt chunks kept, so timings compute each."""
        if width not in self.engines:
            self.engines[width] = build_engine(self.model, None, self.shape.name, StepWidth.parse(width),
                                               prefix_cache_bytes=0)
        return self.engines[width]

    def prompt(self, i: int) -> list[int]:
        return random_ids(1000 + i, self.plan.prompt_len, self.shape.vocab)

    def steps(self, engine: Engine, prompt: list[int]) -> StepConfig:
        return engine.steps(len(prompt), self.plan.new_tokens)

    def timed(self, run: Callable[[], object]) -> tuple[float, object]:
        """Seconds of `run()` from a synchronized start to a synchronized end (CUDA queues kernels), and its value."""
        synchronize(self.plan.device)
        start = time.perf_counter()
        value = run()
        synchronize(self.plan.device)
        return time.perf_counter() - start, value

    def fastest(self, run: Callable[[], object]) -> tuple[float, object]:
        """The fastest of `repeats` timed runs; other work only ever adds time."""
        return min((self.timed(run) for _ in range(self.plan.repeats)), key=lambda timed: timed[0])


def random_ids(seed: int, n: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, vocab) for _ in range(n)]  # not 0 or 1, the pad and BOS ids


def build_model(shape: Shape, plan: Plan, seed: int = 0) -> torch.nn.Module:
    """Weights drawn from `seed`, on the device and in the dtype they run in (a 1.1B draw on a CPU takes a while)."""
    torch.manual_seed(seed)
    with torch.device(plan.device):
        return AutoModelForCausalLM.from_config(shape.config(), dtype=plan.dtype).eval()


def reference_kinds(greedy: list[int], vocab: int, seed: int) -> dict[str, list[list[int]]]:
    """The reply itself (oracle), it with every PERTURB_EVERY-th token changed, and random tokens (hostile)."""
    perturbed = [(t + 1) % vocab if i % PERTURB_EVERY == PERTURB_EVERY - 1 else t for i, t in enumerate(greedy)]
    return {"oracle": [greedy], "perturbed": [perturbed], "hostile": [random_ids(seed, len(greedy), vocab)]}


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None if len(a) == len(b) else
                min(len(a), len(b)))


def run_all_at_once(tasks: list[Callable[[], object]], wait_s: float) -> list:
    """What each task returned, all run at once (decoding.threads.run_at_once); the first error raised again."""
    outcomes = run_at_once(tasks, wait_s)
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if errors:
        raise errors[0]
    return outcomes


def open_scheduler(engine: Engine, replies: int) -> Scheduler:
    """As the chat service opens it (chatbot/service.py): sharing only where this machine keeps a row's bits."""
    if engine.forward != "packed":
        raise RuntimeError(f"the scheduler runs the packed forward only; auto chose the {engine.forward} forward")
    return Scheduler.checked(engine.model, engine.step_width, replies, short_lanes=not engine.padded_steps)


# --- the sections -----------------------------------------------------------------------------------------------


def engines(run: ShapeRun) -> dict:
    """Each width's engine: its line, width, forward and the seconds it took to build (auto measures)."""
    built = {}
    for width in WIDTHS:
        seconds, engine = run.timed(lambda width=width: run.engine(width))
        built[width] = {"line": engine.describe(), "step_width": engine.step_width, "forward": engine.forward,
                        "padded_steps": engine.padded_steps, "attention": engine.attention, "seconds": seconds}
    return built


def identity(run: ShapeRun) -> dict:
    """LLMA against greedy at every width, every reference kind and policy; tokens per forward by kind."""
    n_new, by_width, mismatches, per_forward = run.plan.new_tokens, {}, [], {}
    distinct = set()
    for width in WIDTHS:
        engine = run.engine(width)
        same = cases = 0
        for i in range(run.plan.prompts):
            if run.deadline.passed():
                return {"truncated": True, "by_width": by_width}
            prompt = run.prompt(i)
            steps = run.steps(engine, prompt)
            greedy = greedy_generate(engine.model, prompt, n_new, steps=steps).tokens
            distinct.add(len(set(greedy)))
            for kind, references in reference_kinds(greedy, run.shape.vocab, seed=i).items():
                for name, policy in POLICIES.items():
                    out = llma_generate(engine.model, prompt, references, policy, LlmaOptions(n_new), steps=steps)
                    cases += 1
                    same += out.tokens == greedy
                    per_forward.setdefault(kind, []).append(len(out.tokens) / max(1, out.forward_passes - 1))
                    if out.tokens != greedy:
                        mismatches.append({"width": width, "prompt": i, "references": kind, "policy": name,
                                           "first_difference": first_difference(out.tokens, greedy)})
        by_width[width] = {"step_width": engine.step_width, "identical": same, "cases": cases}
    return {
        "identical": sum(w["identical"] for w in by_width.values()),
        "cases": sum(w["cases"] for w in by_width.values()),
        "by_width": by_width, "mismatches": mismatches[:20],
        "tokens_per_forward": {kind: sum(v) / len(v) for kind, v in per_forward.items()},
        "fewest_distinct_greedy_tokens": min(distinct),  # 1 would mean greedy repeats one token: a useless model
    }


def shared_forwards(run: ShapeRun) -> dict:
    """`replies` replies (greedy, and LLMA with each reference kind) at once through the scheduler, each against
    greedy decoded alone."""
    engine, n_new = run.engine("auto"), run.plan.new_tokens
    kinds = ("greedy", "oracle", "perturbed", "hostile")
    prompts = [run.prompt(200 + i) for i in range(run.plan.replies)]
    alone = [greedy_generate(engine.model, p, n_new, steps=run.steps(engine, p)).tokens for p in prompts]
    sharings = [Sharing() for _ in prompts]

    def together(i: int, scheduler: Scheduler) -> list[int]:
        prompt, kind, steps = prompts[i], kinds[i % len(kinds)], run.steps(engine, prompts[i])
        if kind == "greedy":
            return scheduled_greedy(scheduler, prompt, LlmaOptions(n_new), steps, sharings[i]).tokens
        result = DecodeResult()
        references = reference_kinds(alone[i], run.shape.vocab, seed=i)[kind]
        for _ in scheduled_llma_stream(scheduler, prompt, references, POLICIES["fixed 1/15"], LlmaOptions(n_new),
                                       steps, result, sharings[i]):
            pass
        return result.tokens

    scheduler = open_scheduler(engine, run.plan.replies)
    try:
        replies = run_all_at_once([lambda i=i: together(i, scheduler) for i in range(len(prompts))], WAIT_S)
    finally:
        scheduler.close()
    differing = [i for i, (a, b) in enumerate(zip(replies, alone, strict=True)) if a != b]
    return {"identical": len(prompts) - len(differing), "cases": len(prompts), "differing": differing,
            "slots": scheduler.max_slots, "padded_to": scheduler.pad_to,
            "mean_others": sum(s.mean_others for s in sharings) / len(sharings)}


def forward_cost(run: ShapeRun) -> dict:
    """Seconds of one forward of n rows attending over K keys, as the engine runs it (the auto engine's forward,
    its argmax included); and a shared forward of `replies` replies' blocks."""
    engine, costs = run.engine("auto"), {}
    for keys in run.plan.keys:
        # Rows at positions keys-64.. attend over exactly `keys` keys (StepConfig.key_len).
        steps = StepConfig(max(run.plan.rows), cache_len=keys, padded=False)
        curve = measure_cost_curve(engine.model, run.plan.rows, context_len=keys - 64, steps=steps)
        costs[str(keys)] = dict(zip(map(str, curve.sizes), curve.seconds, strict=True))
    result = {"seconds_by_keys_and_rows": costs}
    if engine.forward == "packed":
        replies = run.plan.replies
        result["shared_forward_seconds"] = {f"{replies}x{rows}": measure_company(engine.model, replies, rows)
                                            for rows in sorted({1, engine.step_width})}
    return result


def speed(run: ShapeRun) -> dict:
    """Tokens/s of each method, the fastest of `repeats` runs per prompt, summed over prompts; the first prompt's
    runs are preceded by an untimed one (first shapes, TorchScript's profiling runs)."""
    engine, n_new = run.engine("auto"), run.plan.new_tokens
    curve = measure_cost_curve(engine.model, steps=engine.steps(256, n_new))  # as the service prices drafts
    policy = AdaptiveCopyPolicy(cost=curve)
    seconds: dict[str, float] = {}
    forwards: dict[str, int] = {}
    tokens: dict[str, int] = {}
    agreement = []
    for i in range(run.plan.prompts):
        if run.deadline.passed():
            break
        prompt = run.prompt(300 + i)
        steps = run.steps(engine, prompt)
        greedy = greedy_generate(engine.model, prompt, n_new, steps=steps).tokens
        references = reference_kinds(greedy, run.shape.vocab, seed=i)
        for name, method in speed_methods(engine, policy, prompt, n_new, steps, references).items():
            if i == 0:
                method()
            took, out = run.fastest(method)
            out_tokens = out if isinstance(out, list) else out.tokens
            seconds[name] = seconds.get(name, 0.0) + took
            tokens[name] = tokens.get(name, 0) + len(out_tokens)
            if not isinstance(out, list):
                forwards[name] = forwards.get(name, 0) + out.forward_passes
            if name == "transformers_generate":
                agreement.append(first_difference(out_tokens, greedy))
    per_s = {name: tokens[name] / seconds[name] for name in seconds}
    return {
        "tokens_per_s": per_s, "seconds": seconds, "tokens": tokens, "forwards": forwards,
        "ratios": ratios(per_s),
        # transformers' forward rounds otherwise than the packed one: where its greedy first chose another token
        "generate_first_differs_from_greedy_at": agreement,
    }


def speed_methods(engine: Engine, policy: CopyPolicy, prompt: list[int], n_new: int, steps: StepConfig,
                  references: dict[str, list[list[int]]]) -> dict[str, Callable[[], object]]:
    """Each timed method on one prompt: transformers' own (on the model the engine packed), then the engine's."""
    source = getattr(engine.model, "source", engine.model)
    options = LlmaOptions(n_new)
    return {
        "transformers_generate": lambda: hf_generate(source, prompt, n_new),
        "transformers_prompt_lookup": lambda: hf_generate(source, prompt, n_new,
                                                          prompt_lookup_num_tokens=PROMPT_LOOKUP_TOKENS),
        "greedy": lambda: greedy_generate(engine.model, prompt, n_new, steps=steps),
        "llma_oracle": lambda: llma_generate(engine.model, prompt, references["oracle"], policy, options, steps=steps),
        "llma_perturbed": lambda: llma_generate(engine.model, prompt, references["perturbed"], policy, options,
                                                steps=steps),
    }


def ratios(per_s: dict[str, float]) -> dict[str, float]:
    def ratio(a: str, b: str) -> float | None:
        return per_s[a] / per_s[b] if a in per_s and b in per_s else None

    return {"greedy_vs_generate": ratio("greedy", "transformers_generate"),
            "prompt_lookup_vs_generate": ratio("transformers_prompt_lookup", "transformers_generate"),
            "llma_oracle_vs_greedy": ratio("llma_oracle", "greedy"),
            "llma_perturbed_vs_greedy": ratio("llma_perturbed", "greedy")}


def hf_generate(model: torch.nn.Module, prompt: list[int], n_new: int, **options) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)  # (1, T)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, do_sample=False,
                         pad_token_id=0, **options)  # (1, T + new); no EOS in these models' configs
    return out[0, len(prompt) :].tolist()


def concurrency(run: ShapeRun) -> dict:
    """`replies` greedy replies at once through the scheduler against the same replies one after another alone."""
    engine, n_new = run.engine("auto"), run.plan.new_tokens
    prompts = [run.prompt(400 + i) for i in range(run.plan.replies)]
    steps = [run.steps(engine, p) for p in prompts]
    sharings = [Sharing() for _ in prompts]

    def one_by_one() -> list[list[int]]:
        return [greedy_generate(engine.model, p, n_new, steps=s).tokens for p, s in zip(prompts, steps, strict=True)]

    def at_once(scheduler: Scheduler) -> list[list[int]]:
        tasks = [lambda i=i: scheduled_greedy(scheduler, prompts[i], LlmaOptions(n_new), steps[i], sharings[i]).tokens
                 for i in range(len(prompts))]
        return run_all_at_once(tasks, WAIT_S)

    scheduler = open_scheduler(engine, run.plan.replies)
    try:
        at_once(scheduler)  # untimed: the shared forward's first shapes
        together_s, together = run.timed(lambda: at_once(scheduler))
    finally:
        scheduler.close()
    greedy_generate(engine.model, prompts[0], n_new, steps=steps[0])  # untimed, likewise
    alone_s, alone = run.timed(one_by_one)
    n_tokens = sum(len(reply) for reply in alone)
    return {
        "one_by_one_tokens_per_s": n_tokens / alone_s, "concurrent_tokens_per_s": n_tokens / together_s,
        "concurrent_vs_one_by_one": alone_s / together_s, "identical": together == alone,
        "slots": scheduler.max_slots, "mean_others": sum(s.mean_others for s in sharings) / len(sharings),
    }
