"""Benchmark LLMA against greedy and Hugging Face decoding on the helpdesk workloads, side by side.

    python -m bench --workload data/questions.jsonl --articles data/articles.json --out results/ \
        [--max-new-tokens 128] [--limit N] [--methods hf_greedy,greedy,...] [--workloads grounded,...] \
        [--grid-questions 12] [--repeats 1] [--peers]
    python -m bench --redraw results/results.json   # the report and plots of a saved run again, no decoding

Writes results.json, report.md and PNG plots to --out.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

from bench.methods import METHODS, PEER_METHODS, RULES
from bench.plots import write_plots
from bench.report import mismatch_lines, render_markdown
from bench.results import Results, load
from bench.run import BenchConfig, run_bench
from bench.workloads import WORKLOADS, Retrieval
from data import DATA_DIR
from decoding import WEIGHTS_SETTINGS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", type=Path, default=DATA_DIR / "questions.jsonl", help="questions JSONL")
    parser.add_argument("--articles", type=Path, default=DATA_DIR / "articles.json", help="article id -> text")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for results.json, report, plots")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="at most this many questions per workload and grid")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="comma-separated subset of " + ",".join(WORKLOADS))
    parser.add_argument("--grid-questions", type=int, default=12,
                        help="cache-assisted questions in the n-by-k grid; 0 skips the grid")
    parser.add_argument("--k", type=int, default=4, help="cache hits used as references")
    parser.add_argument("--threshold", type=float, default=0.5, help="least cosine similarity of a cache hit")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=1, help="rounds per question; each method keeps its fastest")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="the engine's dtype; auto is what `make run` picks on this machine")
    parser.add_argument("--rule", choices=tuple(RULES), default="dry",
                        help="the decoding rule greedy and LLMA share: dry (the app's) or off (plain greedy)")
    parser.add_argument("--step-width", default="auto",
                        help="every decode forward this wide (0: one-token steps); auto: measured, as make run does")
    parser.add_argument("--weights", choices=WEIGHTS_SETTINGS, default="auto",
                        help="the packed forward's weight format; auto: measured, as make run does")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--peers", action="store_true", default=None,
                       help="run " + ",".join(PEER_METHODS) + " (the default where llama-cpp-python is installed: "
                       "make peers)")
    peers.add_argument("--no-peers", dest="peers", action="store_false", help="leave the peer rows out")
    parser.add_argument("--no-step-costs", dest="step_costs", action="store_false",
                        help="leave out the table of the step beside other widths and kernels")
    parser.add_argument("--redraw", type=Path, default=None, help="a saved results.json: write its report again")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if "greedy" not in args.methods:
        args.methods.insert(0, "greedy")  # the baseline every speedup and identity check is measured against
    if args.peers is None:  # where llama.cpp is installed, every report compares with it
        args.peers = importlib.util.find_spec("llama_cpp") is not None
    if args.peers:
        args.methods += list(PEER_METHODS)
    chosen = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if not chosen or chosen - set(WORKLOADS):
        parser.error(f"--workloads: choose from {', '.join(WORKLOADS)}, not {sorted(chosen - set(WORKLOADS))}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    return args


def config_of(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        workload=args.workload, articles=args.articles, max_new_tokens=args.max_new_tokens, limit=args.limit,
        methods=args.methods, grid_questions=args.grid_questions, retrieval=Retrieval(args.k, args.threshold),
        repeats=args.repeats, workloads=args.workloads, dtype=args.dtype, rule=args.rule,
        step_width=args.step_width, weights=args.weights, step_costs=args.step_costs,
    )


def write_report(results: Results, out_dir: Path) -> list[Path]:
    """report.md and the plots in `out_dir`; returns their paths."""
    plots = write_plots(results, out_dir)
    report = out_dir / "report.md"
    report.write_text(render_markdown(results, [p.name for p in plots]))
    return [report, *plots]


def warn_about_mismatches(results: Results) -> None:
    """LLMA must reproduce greedy decoding exactly; anything else is a bug worth shouting about."""
    lines = mismatch_lines(results)
    if lines:
        banner = "!" * 78
        print(f"\n{banner}\n!! NOT LOSSLESS: LLMA differs from greedy:\n"
              + "\n".join(f"!! {line}" for line in lines) + f"\n{banner}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.redraw:
        print("\n".join(str(p) for p in write_report(load(args.redraw), args.redraw.parent)))
        return
    torch.set_num_threads(args.threads)
    results = run_bench(config_of(args))
    warn_about_mismatches(results)
    args.out.mkdir(parents=True, exist_ok=True)
    results.save(args.out / "results.json")
    written = write_report(results, args.out)
    print(f"wrote {args.out / 'results.json'} and {', '.join(str(p) for p in written)} "
          f"in {results.wall_seconds:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
