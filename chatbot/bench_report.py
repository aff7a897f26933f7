"""Markdown tables, targets and PNG plots of a bench run, drawn from the dict saved as results.json.

    python -m chatbot.bench_report results/results.json   # redraw the report of a saved run
"""

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

LLMA_METHODS = ("llma_paper", "llma", "oracle")

WORKLOAD_NOTES = {
    "cache_assisted": "later wordings of a paraphrase group; references = answers of the top-k similar cached "
    "questions (the first wordings, answered greedily); no article in the prompt (the paper's setting)",
    "rag": "first wordings with the group's help article in the system message; the article is a reference too",
    "repeat": "a first wording asked again verbatim; reference = its own stored answer",
    "followup": "a follow-up asked as the second turn after the group's first question and its greedy answer; "
    "reference = that earlier answer (it is also in the prompt)",
    "novel": "single-wording groups; references = whatever the cache returns (usually nothing or unrelated answers)",
}


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool | None  # None when the run did not measure it
    margin: str


# --- targets ------------------------------------------------------------------------------------


def find_row(results: dict, workload: str, method: str) -> dict | None:
    row = next((r for r in results["rows"] if r["workload"] == workload and r["method"] == method), None)
    return row if row and row["questions"] else None


def speedup(results: dict, workload: str, method: str) -> float | None:
    row = find_row(results, workload, method)
    return row["speedup_vs_greedy"] if row else None


def ratio_target(name: str, ours: float | None, theirs: float | None, least: float, goal: str) -> Target:
    """Passes when ours / theirs reaches `least` (strictly beats it when least is 1)."""
    if ours is None or theirs is None:
        return Target(name, goal, "n/a", None, "n/a")
    ratio = ours / theirs
    passed = ratio > least if least == 1 else ratio >= least
    measured = f"{ours:.2f}x vs {theirs:.2f}x ({ratio:.0%})"
    return Target(name, goal, measured, passed, f"{(ratio - least) * 100:+.0f} points")


def level_target(name: str, value: float | None, least: float, goal: str) -> Target:
    if value is None:
        return Target(name, goal, "n/a", None, "n/a")
    return Target(name, goal, f"{value:.2f}x", value >= least, f"{value - least:+.2f}x")


def identity_target(results: dict) -> Target:
    rows = [r for r in results["rows"] if r["method"] in LLMA_METHODS and r["questions"]]
    runs = sum(r["questions"] for r in rows)
    wrong = sum(len(r["mismatches"]) for r in rows)
    return Target(
        "every LLMA output equals greedy's", "100% identical", f"{runs - wrong}/{runs} identical",
        wrong == 0 and runs > 0, f"{wrong} mismatching",
    )


def compute_targets(results: dict) -> list[Target]:
    llma = speedup(results, "cache_assisted", "llma")
    novel = find_row(results, "novel", "llma")
    return [
        level_target("LLMA speedup over greedy, cache-assisted", llma, 3.0, ">= 3x"),
        ratio_target("LLMA vs llma_paper, cache-assisted", llma, speedup(results, "cache_assisted", "llma_paper"),
                     1.0, "faster"),
        ratio_target("LLMA vs hf_prompt_lookup, cache-assisted", llma,
                     speedup(results, "cache_assisted", "hf_prompt_lookup"), 1.0, "faster"),
        ratio_target("LLMA share of the oracle's speedup, cache-assisted", llma,
                     speedup(results, "cache_assisted", "oracle"), 0.8, ">= 80%"),
        level_target("LLMA worst per-question speedup, novel", novel["worst_speedup"] if novel else None, 0.95,
                     ">= 0.95x"),
        identity_target(results),
    ]


def shortfall_section(results: dict, targets: list[Target]) -> str:
    """For each missed speed target, the measurements that explain it: passes, copies, the cost curve."""
    missed = {t.name for t in targets if t.passed is False}
    llma, oracle = find_row(results, "cache_assisted", "llma"), find_row(results, "cache_assisted", "oracle")
    lines = []
    if llma and oracle and any("cache-assisted" in name for name in missed):
        # A pass that yields t tokens and costs c one-token steps gives t / c; the implied mean cost per pass.
        cost = llma["tokens_per_pass"] / llma["speedup_vs_greedy"]
        oracle_cost = oracle["tokens_per_pass"] / oracle["speedup_vs_greedy"]
        lines.append(
            f"- **Cache-assisted speed is bounded by what the references hold.** LLMA made "
            f"{llma['tokens_per_pass']:.2f} tokens per forward pass and copied {llma['mean_copied_share']:.0%} of "
            f"each reply; with the exact greedy answer as reference (oracle) the same questions make "
            f"{oracle['tokens_per_pass']:.2f} tokens per pass and copy {oracle['mean_copied_share']:.0%}. The "
            f"model answers a rewording differently from the cached first wording, so most of a reply is not in "
            f"any reference and no policy can copy it." + _own_answer_note(results)
        )
        lines.append(
            f"- **What 3x would take.** A pass cost LLMA {cost:.2f} one-token steps on average here (drafts make "
            f"passes wider; see the cost curve), so 3x needs about {3 * cost:.1f} tokens per pass, "
            f"{3 * cost / llma['tokens_per_pass']:.1f} times the {llma['tokens_per_pass']:.2f} it made. The oracle "
            f"paid {oracle_cost:.2f} steps per pass."
        )
    curve = results.get("cost_curve")
    if curve and len(curve["sizes"]) > 1 and missed:
        relative = {n: s / curve["seconds"][0] for n, s in zip(curve["sizes"], curve["seconds"], strict=True)}
        wide = ", ".join(f"{n} tokens {r:.2f}x" for n, r in relative.items() if n > 1)
        lines.append(
            f"- **The cost curve.** A forward of several tokens costs (relative to one): {wide}. On this CPU a draft "
            "pays only when most of it is accepted, whereas the paper's GPU verifies a few extra tokens almost "
            "for free."
        )
    novel = find_row(results, "novel", "llma")
    if novel and "LLMA worst per-question speedup, novel" in missed:
        worst = min(
            (q for q in results["questions"] if q["workload"] == "novel"),
            key=lambda q: _question_speedup(q, "llma"),
        )
        run = next(r for r in worst["runs"] if r["method"] == "llma")
        twin = find_row(results, "novel", "hf_greedy")  # the same work as greedy: its spread is timing noise
        noise = (
            f" Timing noise alone: hf_greedy, which does greedy's work, had a worst of {twin['worst_speedup']:.2f}x "
            "on the same questions." if twin else ""
        )
        lines.append(
            f"- **Slowest novel question:** \"{worst['question']}\" at {_question_speedup(worst, 'llma'):.2f}x: "
            f"{run['tokens']} tokens in {run['forward_passes']} passes, {run['copied_tokens']} copied. A rejected "
            f"draft costs a wider forward for no token.{noise}"
        )
    return "## Why targets are missed\n\n" + "\n".join(lines) if lines else ""


def _own_answer_note(results: dict) -> str:
    """LLMA's speedup with and without the group's own cached answer among the references."""
    questions = [q for q in results["questions"] if q["workload"] == "cache_assisted"]
    own = [q for q in questions if any(ref["kind"] == "cache" and ref["same_group"] for ref in q["references"])]
    others = [q for q in questions if q not in own]
    if not own or not others:
        return ""
    return (
        f" With the group's own earlier answer among the references LLMA ran {_sum_speedup(own, 'llma'):.2f}x "
        f"({len(own)} questions), without it {_sum_speedup(others, 'llma'):.2f}x ({len(others)})."
    )


def _sum_speedup(questions: list[dict], method: str) -> float:
    def seconds(q: dict, m: str) -> float:
        return next(r["seconds"] for r in q["runs"] if r["method"] == m)

    return sum(seconds(q, "greedy") for q in questions) / sum(seconds(q, method) for q in questions)


def _question_speedup(question: dict, method: str) -> float:
    runs = {r["method"]: r for r in question["runs"]}
    return runs["greedy"]["seconds"] / runs[method]["seconds"] if method in runs else float("inf")


# --- markdown -----------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def targets_section(targets: list[Target]) -> str:
    verdict = {True: "**PASS**", False: "**MISS**", None: "not measured"}
    rows = [[t.name, t.goal, t.measured, verdict[t.passed], t.margin] for t in targets]
    return "## Targets\n\n" + table(["target", "goal", "measured", "result", "margin"], rows)


def results_section(results: dict) -> str:
    header = ["workload", "method", "questions", "speedup vs greedy", "vs hf_greedy", "CPU-time speedup", "tokens/s",
              "tokens/pass", "identical", "worst", "median", "copied"]
    rows = [
        [r["workload"], r["method"], str(r["questions"]), fmt(r["speedup_vs_greedy"], ".2f", "x"),
         fmt(r["speedup_vs_hf_greedy"], ".2f", "x"), fmt(r["cpu_speedup_vs_greedy"], ".2f", "x"),
         fmt(r["tokens_per_s"], ".1f"), fmt(r["tokens_per_pass"]),
         fmt(r["identical_share"], ".0%"), fmt(r["worst_speedup"], ".2f", "x"), fmt(r["median_speedup"], ".2f", "x"),
         fmt(r["mean_copied_share"], ".0%")]
        for r in results["rows"]
    ]
    return (
        "## Results\n\nSpeedups are sums of seconds over the workload's questions (greedy's / the method's); worst and "
        "median are per question; the CPU-time speedup is the same ratio in this process's CPU seconds, which other "
        "processes on a shared machine move less than wall clock (but still move). Tokens per pass counts every "
        "forward call, the prefill included. Copied is the mean share of reply tokens taken from a draft (derived "
        "from passes for the HF methods).\n\n"
        + table(header, rows)
    )


def workloads_section(results: dict) -> str:
    lines = ["## Workloads", ""]
    for workload in results["workloads"]:
        records = [q for q in results["questions"] if q["workload"] == workload]
        lines.append(f"- **{workload}** ({len(records)} questions): {WORKLOAD_NOTES.get(workload, '')}."
                     + retrieval_note(records))
    lines.append(
        "\n`hf_prompt_lookup` is transformers' prompt lookup decoding: it only searches the input ids, so on the cache "
        "workloads (cache_assisted, repeat, novel) it cannot see the references and runs on the plain prompt, which is "
        "how a user would reach for it. On rag and followup the article or earlier answer is in the prompt."
    )
    if results["settings"]["limit"] is not None:
        lines.append(
            f"\nWith --limit the cache holds only the {results['settings']['cache_entries']} answers the selected "
            "questions need, so retrieval meets fewer unrelated answers than in a full run."
        )
    return "\n".join(lines)


def retrieval_note(records: list[dict]) -> str:
    hits = [[ref for ref in q["references"] if ref["kind"] == "cache"] for q in records]
    if not any(hits):
        return " The cache returned no references." if records and records[0]["references"] == [] else ""
    own = sum(any(ref["same_group"] for ref in refs) for refs in hits)
    mean_refs = statistics.mean(len(refs) for refs in hits)
    return f" Retrieval: {mean_refs:.1f} references per question; the group's own answer among them: {own}/{len(hits)}."


def grid_section(results: dict) -> str:
    cells = results["grid"]
    if not cells or all(c["speedup"] is None for c in cells):
        return "## n-by-k grid\n\nNot run (no cache-assisted questions or --grid-questions 0)."
    copy_lens = sorted({c["copy_len"] for c in cells})
    match_lens = sorted({c["match_len"] for c in cells})
    by_cell = {(c["match_len"], c["copy_len"]): c for c in cells}
    header = ["", *(f"k={k}" for k in copy_lens)]
    speedups = [[f"n={n}"] + [speedup_entry(by_cell[n, k]) for k in copy_lens] for n in match_lens]
    per_pass = [[f"n={n}"] + [fmt(by_cell[n, k]["tokens_per_pass"]) for k in copy_lens] for n in match_lens]
    return (
        "## n-by-k grid\n\nFixedCopyPolicy(match_len=n, copy_len=k) on the first "
        f"{results['settings']['grid_questions']} cache-assisted questions, like the paper's figure. Speedup over "
        "greedy, wall clock (CPU time):\n\n" + table(header, speedups)
        + "\n\nTokens per forward pass (the same on any machine):\n\n" + table(header, per_pass)
    )


def speedup_entry(cell: dict) -> str:
    return f"{fmt(cell['speedup'], '.2f', 'x')} ({fmt(cell['cpu_speedup'], '.2f', 'x')})"


def cost_section(results: dict) -> str:
    curve = results["cost_curve"]
    base = curve["seconds"][0]
    points = zip(curve["sizes"], curve["seconds"], strict=True)
    rows = [[str(n), f"{s * 1000:.1f}", f"{s / base:.2f}"] for n, s in points]
    intro = (
        f"Seconds of one forward of n new tokens over a {curve['context_len']}-token KV cache, as "
        "`decoding.measure_cost_curve` measured them at the start of the run: what one verification costs, "
        "and the curve the default policy plans with."
    )
    return f"## Forward cost curve\n\n{intro}\n\n" + table(["tokens", "ms", "relative to 1 token"], rows)


def header_section(results: dict) -> str:
    s, m, model = results["settings"], results["machine"], results["model"]
    phases = ", ".join(f"{name} {secs:.0f} s" for name, secs in results["phase_seconds"].items())
    lines = [
        "# LLMA benchmark",
        "",
        f"- Model: {model['id']} ({model['dtype']}), at most {s['max_new_tokens']} new tokens per reply.",
        f"- Questions: at most {s['limit']} per workload, each method's fastest of {s['repeats']} round(s); "
        f"cache k={s['k']}, threshold {s['threshold']}, {s['cache_entries']} stored answers.",
        f"- Machine: {m['platform']}, {m['cpu_count']} CPUs, {m['torch_threads']} torch threads, "
        f"OMP_WAIT_POLICY={m.get('omp_wait_policy') or 'unset (OpenMP default)'}; "
        f"load average {m['load_average_at_start'][0]:.1f} at start, {m['load_average_at_end'][0]:.1f} at end.",
        f"- Took {results['wall_seconds']:.0f} s: {phases}.",
    ]
    return "\n".join(lines) + busy_machine_note(m)


def busy_machine_note(machine: dict) -> str:
    load = max(machine["load_average_at_start"][0], machine["load_average_at_end"][0])
    if load <= machine["cpu_count"]:
        return ""
    return (
        f"\n\n> **Busy machine:** load average {load:.1f} on {machine['cpu_count']} CPUs. Wall-clock speedups are "
        "noisy; compare them with the CPU-time column."
    )


def mismatch_warning(results: dict) -> str:
    bad = [r for r in results["rows"] if r["method"] in LLMA_METHODS and r["mismatches"]]
    if not bad:
        return ""
    lines = [f"- {r['method']} on {r['workload']}: {q}" for r in bad for q in r["mismatches"]]
    return "> **WARNING: LLMA output differs from greedy decoding (not lossless):**\n>\n" + "\n".join(
        f"> {line}" for line in lines
    )


def render_markdown(results: dict, plot_names: list[str]) -> str:
    targets = compute_targets(results)
    sections = [
        header_section(results),
        mismatch_warning(results),
        targets_section(targets),
        shortfall_section(results, targets),
        results_section(results),
        workloads_section(results),
        grid_section(results),
        cost_section(results),
        "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in plot_names),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


# --- plots --------------------------------------------------------------------------------------


def per_question_speedups(results: dict, workload: str, method: str) -> list[float]:
    measured = [q for q in results["questions"] if q["workload"] == workload]
    return [_question_speedup(q, method) for q in measured if any(r["method"] == method for r in q["runs"])]


def plot_speedup_by_method(results: dict, path: Path) -> None:
    workloads = results["workloads"]
    methods = [m for m in results["settings"]["methods"] if m != "greedy"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(methods))
    for i, method in enumerate(methods):
        values = [speedup(results, w, method) or 0.0 for w in workloads]
        ax.bar([x + i * width for x in range(len(workloads))], values, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(methods) - 1) / 2 for x in range(len(workloads))], workloads)
    ax.set_ylabel("speedup over greedy (x)")
    ax.set_title("Speedup by method and workload")
    ax.legend(fontsize=8)
    save(fig, path)


def plot_per_question(results: dict, path: Path) -> None:
    methods = [m for m in ("llma_paper", "llma") if m in results["settings"]["methods"]]
    data, labels = [], []
    for workload in results["workloads"]:
        for method in methods:
            data.append(per_question_speedups(results, workload, method) or [float("nan")])
            labels.append(f"{workload}\n{method}")
    fig, ax = plt.subplots(figsize=(max(6, len(labels) * 0.9), 4.5))
    ax.boxplot(data, tick_labels=labels)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("per-question speedup over greedy (x)")
    ax.set_title("Per-question speedup: llma vs llma_paper")
    save(fig, path)


def plot_grid(results: dict, path: Path) -> None:
    cells = results["grid"]
    match_lens = sorted({c["match_len"] for c in cells})
    copy_lens = sorted({c["copy_len"] for c in cells})
    by_cell = {(c["match_len"], c["copy_len"]): c["speedup"] for c in cells}
    values = [[by_cell.get((n, k)) or float("nan") for k in copy_lens] for n in match_lens]  # (n, k)
    fig, ax = plt.subplots(figsize=(6, 4))
    image = ax.imshow(values, cmap="viridis", aspect="auto")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            light = image.norm(value) > 0.6  # the top of viridis is yellow: write on it in black
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="black" if light else "white", fontsize=9)
    ax.set_xticks(range(len(copy_lens)), [f"k={k}" for k in copy_lens])
    ax.set_yticks(range(len(match_lens)), [f"n={n}" for n in match_lens])
    ax.set_title("FixedCopyPolicy speedup over greedy, cache-assisted")
    fig.colorbar(image, ax=ax, label="speedup (x)")
    save(fig, path)


def plot_cost_curve(results: dict, path: Path) -> None:
    curve = results["cost_curve"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(curve["sizes"], [s * 1000 for s in curve["seconds"]], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in one forward pass")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"Forward cost over a {curve['context_len']}-token KV cache")
    ax.set_ylim(bottom=0)
    save(fig, path)


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(results: dict, out_dir: Path) -> list[Path]:
    plots = {
        "speedup_by_method.png": plot_speedup_by_method,
        "speedup_per_question.png": plot_per_question,
        "grid_heatmap.png": plot_grid,
        "cost_curve.png": plot_cost_curve,
    }
    for name, plot in plots.items():
        plot(results, out_dir / name)
    return [out_dir / name for name in plots]


def write_report(results: dict, out_dir: Path) -> list[Path]:
    """report.md and the plots in `out_dir`; returns their paths."""
    plots = write_plots(results, out_dir)
    report = out_dir / "report.md"
    report.write_text(render_markdown(results, [p.name for p in plots]))
    return [report, *plots]


if __name__ == "__main__":
    import json

    saved = Path(sys.argv[1] if len(sys.argv) > 1 else "results/results.json")
    print("\n".join(str(p) for p in write_report(json.loads(saved.read_text()), saved.parent)))
