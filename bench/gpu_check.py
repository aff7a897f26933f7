"""The engine on a GPU (issue 43): a check that runs on a GPU machine in minutes and anywhere in seconds.

    python -m bench.gpu_check [--cpu-dry-run] [--out DIR] [--time-limit S] [--shapes llama-1.1b,smollm2-135m]

Random-weight Llama models of real shapes, built in memory from a seed (no weight files travel), in bf16 on
CUDA; `--cpu-dry-run` takes a tiny one in float32 on the CPU, so the check runs in CI and never rots. For each
shape six sections, each in its own try so that one failure loses nothing else, under one time guard that
skips what is left once it has passed:

- engines: `build_engine` at auto and at widths 4, 8 and 16 (the engine line, the width chosen);
- identity: LLMA against this engine's greedy with oracle, perturbed and hostile references, at every width;
- shared_forwards: 8 replies sharing forwards through the `Scheduler`, each against the reply decoded alone;
- forward_cost: one forward of 1..64 rows over 256 and 1,024 keys (`measure_cost_curve`, synchronized);
- speed: tokens/s of transformers' generate and its prompt lookup, this engine's greedy and LLMA;
- concurrency: 8 replies at once against one after another.

Writes report.json and report.md to --out (default docs/gpu/<date>-<GPU name>/; a temporary folder for a dry run).
Needs torch and transformers 5 (the `cache=` keyword, decoding/runners.py), not the bundled model or tokenizer.
"""

import argparse
import datetime
import gc
import json
import platform
import random
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import transformers
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
from decoding.hardware import device_name, synchronize
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


SECTION_RUNS: dict[str, Callable[[ShapeRun], dict]] = {
    "engines": engines, "identity": identity, "shared_forwards": shared_forwards, "forward_cost": forward_cost,
    "speed": speed, "concurrency": concurrency,
}


# --- the run and its report ---------------------------------------------------------------------------------------


def run_section(run: ShapeRun, name: str) -> dict:
    """One section in its own try: its result, or its error with the traceback, or skipped past the deadline."""
    entry = {"shape": run.shape.name, "section": name}
    if run.deadline.passed():
        print(f"[{run.shape.name}] {name}: skipped (time limit)", flush=True)
        return {**entry, "status": "skipped"}
    start = time.perf_counter()
    try:
        entry |= {"status": "ok", "result": SECTION_RUNS[name](run)}
    except Exception as error:
        entry |= {"status": "error", "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    entry["seconds"] = time.perf_counter() - start
    print(f"[{run.shape.name}] {name}: {entry['status']} in {entry['seconds']:.1f} s", flush=True)
    return entry


def run_shape(plan: Plan, shape: Shape, deadline: Deadline) -> list[dict]:
    try:
        model = build_model(shape, plan)
    except Exception as error:
        return [{"shape": shape.name, "section": name, "status": "error", "error": f"model: {error}"}
                for name in SECTIONS]
    run = ShapeRun(plan, shape, model, deadline)
    try:
        return [run_section(run, name) for name in SECTIONS]
    finally:
        run.engines.clear()
        del run, model
        gc.collect()
        if plan.device == "cuda":
            torch.cuda.empty_cache()


def machine(plan: Plan) -> dict:
    info = {"device": device_name(plan.device), "dtype": str(plan.dtype).removeprefix("torch."),
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu": device_name("cpu"), "torch_threads": torch.get_num_threads()}
    if plan.device == "cuda":
        info["cuda"] = torch.version.cuda
    return info


def summary(sections: list[dict]) -> dict:
    """Whether every reply equalled greedy, and the issue's bar on the 1.1B shape where it ran."""
    found = {(s["shape"], s["section"]): s.get("result", {}) for s in sections if s["status"] == "ok"}
    checks = [r for (_, name), r in found.items() if name in ("identity", "shared_forwards")]
    identical = bool(checks) and all(r.get("identical") == r.get("cases") and not r.get("truncated") for r in checks)
    measured = {**found.get(("llama-1.1b", "speed"), {}).get("ratios", {}),
                **{k: v for k, v in found.get(("llama-1.1b", "concurrency"), {}).items() if k.endswith("one_by_one")}}
    targets = {name: {"at_least": bar, "measured": measured.get(name),
                      "met": measured[name] >= bar if measured.get(name) is not None else None}
               for name, bar in TARGETS}
    failed = [f"{s['shape']}/{s['section']}" for s in sections if s["status"] != "ok"]
    return {"bit_identical": identical, "sections_not_ok": failed, "targets_on_llama_1.1b": targets}


def run_check(plan: Plan, out: Path, time_limit_s: float) -> dict:
    """Every section of every shape of `plan`, then report.json and report.md in `out`; returns the report."""
    started, deadline = time.perf_counter(), Deadline(time_limit_s)
    sections = [entry for name in plan.shapes for entry in run_shape(plan, SHAPES[name], deadline)]
    report = {
        "date": datetime.date.today().isoformat(), "dry_run": plan.device == "cpu", "time_limit_s": time_limit_s,
        "seconds": time.perf_counter() - started, "machine": machine(plan),
        "plan": {**asdict(plan), "dtype": str(plan.dtype)},
        "shapes": {name: asdict(SHAPES[name]) for name in plan.shapes},
        "summary": summary(sections), "sections": sections,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(render_markdown(report))
    return report


def render_markdown(report: dict) -> str:
    m, s = report["machine"], report["summary"]
    lines = [
        f"# The engine on {m['device']} ({report['date']}{', CPU dry run' if report['dry_run'] else ''})", "",
        f"torch {m['torch']}, transformers {m['transformers']}, {m['dtype']}; {report['seconds']:.0f} s of a "
        f"{report['time_limit_s']:.0f} s limit. Written by `python -m bench.gpu_check`; the figures are in "
        "report.json.", "",
        f"- Every LLMA and shared-forward reply identical to greedy alone: **{s['bit_identical']}**",
        f"- Sections not ok: {', '.join(s['sections_not_ok']) or 'none'}",
    ]
    for name, target in s["targets_on_llama_1.1b"].items():
        value = "not measured" if target["measured"] is None else f"{target['measured']:.2f}x"
        lines.append(f"- {name}: {value} (bar: {target['at_least']}x, met: {target['met']})")
    for section in report["sections"]:
        lines += ["", f"## {section['shape']}: {section['section']} ({section['status']})", ""]
        if section["status"] == "error":
            lines += ["```", section.get("traceback", section["error"]).strip(), "```"]
        elif section["status"] == "ok":
            try:
                lines += section_lines(section["section"], section["result"])
            except (KeyError, TypeError, ValueError, StopIteration):  # a result not shaped as expected: as it is
                lines += section_lines("", section["result"])
    return "\n".join(lines) + "\n"


def section_lines(name: str, result: dict) -> list[str]:
    if name == "engines":
        return ["| width | engine line | W | s |", "|---|---|---|---|"] + [
            f"| {w} | {e['line']} | {e['step_width']} | {e['seconds']:.1f} |" for w, e in result.items()]
    if name == "forward_cost":
        costs = result["seconds_by_keys_and_rows"]
        rows = list(next(iter(costs.values())))
        table = [f"| keys | {' | '.join(rows)} rows |", "|---" * (len(rows) + 1) + "|"] + [
            f"| {keys} | {' | '.join(f'{1000 * by_rows[r]:.2f}' for r in rows)} ms |"
            for keys, by_rows in costs.items()]
        shared = [f"- shared forward {k}: {1000 * v:.2f} ms"
                  for k, v in result.get("shared_forward_seconds", {}).items()]
        return table + ([""] + shared if shared else [])
    if name == "speed":
        per_s = result["tokens_per_s"]
        return ["| method | tokens/s |", "|---|---|"] + [f"| {k} | {v:.1f} |" for k, v in per_s.items()] + [""] + [
            f"- {k}: {v:.2f}x" for k, v in result["ratios"].items() if v is not None]
    return [f"- {k}: {json.dumps(rounded(v), default=str)}" for k, v in result.items()]


def rounded(value):
    """`value` with its floats to 3 significant digits, for the markdown (report.json keeps them whole)."""
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def default_out(plan: Plan) -> Path:
    if plan.device == "cpu":
        return Path(tempfile.mkdtemp(prefix="gpu-check-"))
    slug = re.sub(r"[^a-z0-9]+", "-", device_name(plan.device).lower()).strip("-")
    return ROOT / "docs" / "gpu" / f"{datetime.date.today().isoformat()}-{slug}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="a tiny model on the CPU in float32 (seconds)")
    parser.add_argument("--out", type=Path, help="folder for report.json and report.md")
    parser.add_argument("--time-limit", type=float, default=420.0, help="seconds after which sections are skipped")
    parser.add_argument("--shapes", help=f"comma-separated, of {', '.join(SHAPES)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = DRY_PLAN if args.cpu_dry_run else GPU_PLAN
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("no CUDA GPU is visible: run with --cpu-dry-run", file=sys.stderr)
        return 2
    if args.shapes:
        plan = replace(plan, shapes=tuple(args.shapes.split(",")))
    unknown = [name for name in plan.shapes if name not in SHAPES]
    if unknown:
        print(f"unknown shapes {unknown}: known are {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    out = args.out or default_out(plan)
    report = run_check(plan, out, args.time_limit)
    print(f"report: {out / 'report.md'}; bit-identical: {report['summary']['bit_identical']}; "
          f"not ok: {report['summary']['sections_not_ok'] or 'none'}")
    return 0 if report["summary"]["bit_identical"] and not report["summary"]["sections_not_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
