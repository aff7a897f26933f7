"""PNG plots of a bench run: speedup by method, per-question spread, the n-by-k grid, the forward cost curve."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from bench.results import Results  # noqa: E402


def per_question_speedups(results: Results, workload: str, method: str) -> list[float]:
    measured = [q.speedup(method) for q in results.questions_of(workload)]
    return [s for s in measured if s is not None]


def plot_speedup_by_method(results: Results, path: Path) -> None:
    workloads = results.workloads
    methods = [m for m in results.settings.methods if m != "greedy"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(methods))
    for i, method in enumerate(methods):
        rows = [results.row(w, method) for w in workloads]
        values = [row.speedup_vs_greedy if row else 0.0 for row in rows]
        ax.bar([x + i * width for x in range(len(workloads))], values, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(methods) - 1) / 2 for x in range(len(workloads))], workloads)
    ax.set_ylabel("speedup over greedy (x)")
    ax.set_title("Speedup by method and workload")
    ax.legend(fontsize=8)
    save(fig, path)


def plot_per_question(results: Results, path: Path) -> None:
    methods = [m for m in ("llma_paper", "llma") if m in results.settings.methods]
    data, labels = [], []
    for workload in results.workloads:
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


def plot_grid(results: Results, path: Path) -> None:
    cells = results.grid
    match_lens = sorted({c.match_len for c in cells})
    copy_lens = sorted({c.copy_len for c in cells})
    by_cell = {(c.match_len, c.copy_len): c.speedup for c in cells}
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


def plot_cost_curve(results: Results, path: Path) -> None:
    curve = results.cost_curve
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(curve.sizes, [s * 1000 for s in curve.seconds], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in one forward pass")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"Forward cost over a {curve.context_len}-token KV cache")
    ax.set_ylim(bottom=0)
    save(fig, path)


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PLOTS = {
    "speedup_by_method.png": plot_speedup_by_method,
    "speedup_per_question.png": plot_per_question,
    "grid_heatmap.png": plot_grid,
    "cost_curve.png": plot_cost_curve,
}


def write_plots(results: Results, out_dir: Path) -> list[Path]:
    """Every plot the run has data for: the grid heatmap only when the grid ran."""
    grid_ran = any(cell.speedup is not None for cell in results.grid)
    names = [name for name in PLOTS if grid_ran or name != "grid_heatmap.png"]
    for name in names:
        PLOTS[name](results, out_dir / name)
    return [out_dir / name for name in names]
