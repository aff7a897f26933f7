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
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import torch
import transformers

from bench.gpu_sections import (
    DRY_PLAN,
    GPU_PLAN,
    ROOT,
    SECTIONS,
    SHAPES,
    TARGETS,
    Deadline,
    Plan,
    Shape,
    ShapeRun,
    build_model,
    concurrency,
    engines,
    forward_cost,
    identity,
    shared_forwards,
    speed,
)
from decoding.hardware import device_name

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
