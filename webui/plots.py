"""Matplotlib figures for the admin dashboard, made from the cache's dashboard numbers.

Figures are built with `Figure` directly (no pyplot), so nothing global is kept between requests.
User questions are drawn with parse_math=False: a "$" in a question is text, not TeX.
"""

from datetime import datetime

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from chatbot import DashboardStats, QuestionCount

from .widgets import shorten

LABEL_CHARS = 60


def speedup_histogram(series: list[dict]) -> Figure:
    """How often each speedup occurred, over all replies; a log axis keeps exact repeats (~50x) and decodes
    (~1-3x) readable side by side."""
    speedups = [point["speedup"] for point in series if point["speedup"] is not None and point["speedup"] > 0]
    fig, ax = _figure("Speedup distribution")
    if speedups:
        low, high = min(min(speedups), 0.9), max(max(speedups), 1.1)
        ax.hist(speedups, bins=np.geomspace(low, high, 25), color="#4c72b0", edgecolor="white")
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
        _log_axis(ax.xaxis, ax.set_xscale)
    ax.set_xlabel("speedup over plain greedy decoding (x, log scale)")
    ax.set_ylabel("replies")
    return _note_if_empty(fig, ax, speedups)


def speedup_over_time(series: list[dict]) -> Figure:
    """Speedup and tokens per forward pass of each reply, oldest first."""
    fig, ax = _figure("Speedup and tokens per forward pass over time")
    times = [point["created_at"] for point in series]
    _plot_points(ax, times, [point["speedup"] for point in series], "speedup (x)", "#4c72b0")
    _plot_points(ax, times, [point["tokens_per_forward_pass"] for point in series], "tokens / forward pass", "#dd8452")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("reply time (UTC)")
    if series:
        _log_axis(ax.yaxis, ax.set_yscale)
        ax.legend(loc="upper left")
        fig.autofmt_xdate()
    return _note_if_empty(fig, ax, series)


def time_saved(series: list[dict]) -> Figure:
    """Seconds saved against plain greedy decoding, summed over replies as they were served."""
    fig, ax = _figure("Time saved against plain greedy decoding")
    if series:
        times = [point["created_at"] for point in series]
        total = np.cumsum([point["seconds_saved"] for point in series])
        ax.plot(times, total, drawstyle="steps-post", color="#55a868", linewidth=1.5)
        ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
        fig.autofmt_xdate()
    ax.set_xlabel("reply time (UTC)")
    ax.set_ylabel("seconds saved, cumulative")
    return _note_if_empty(fig, ax, series)


def hit_rates(stats: DashboardStats) -> Figure:
    """Share of replies served as exact repeats, and share that had similar past answers as references."""
    fig, ax = _figure(f"Hit rates over {stats.replies} replies")
    labels = ["exact hit", "reference hit"]
    rates = [stats.exact_hit_rate, stats.reference_hit_rate]
    bars = ax.bar(labels, [rate * 100 for rate in rates], color=["#55a868", "#4c72b0"])
    ax.bar_label(bars, labels=[f"{rate:.0%}" for rate in rates])
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of replies")
    return fig


def question_bars(questions: list[QuestionCount], title: str) -> Figure:
    """Horizontal bars of how often each question was asked, the most asked on top."""
    fig, ax = _figure(title, height=max(2.5, 0.4 * len(questions) + 1))
    labels = [shorten(q.question, LABEL_CHARS) for q in reversed(questions)]
    ax.barh(range(len(labels)), [q.count for q in reversed(questions)], color="#8172b3")
    ax.set_yticks(range(len(labels)), labels, parse_math=False, fontsize=8)
    ax.set_xlabel("times asked")
    return _note_if_empty(fig, ax, questions)


def _figure(title: str, height: float = 3.2) -> tuple:
    fig = Figure(figsize=(7, height), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11)
    return fig, ax


def _log_axis(axis, set_scale) -> None:
    """Log scale with plain numbers (2, 5, 10) instead of powers of ten."""
    set_scale("log")
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def _plot_points(ax, times: list[datetime], values: list[float | None], label: str, color: str) -> None:
    known = [(t, v) for t, v in zip(times, values, strict=True) if v is not None]
    if known:
        ax.plot(*zip(*known, strict=True), marker="o", markersize=3, linewidth=1, label=label, color=color)


def _note_if_empty(fig: Figure, ax, data: list) -> Figure:
    if not data:
        ax.text(0.5, 0.5, "nothing yet", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_xticks([])
        ax.set_yticks([])
    return fig

