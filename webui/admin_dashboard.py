"""Admin tab: how much the cache helps: speedups, hit rates, time saved, what people ask."""

import gradio as gr

from chatbot import AdminService, DashboardStats, EngineSummary

from . import plots
from .auth import StaffLogin, shows_refusals


class Dashboard:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self) -> list:
        """Lay out and wire the tab; returns its outputs so the page can refresh them on tab select."""
        refresh = gr.Button("Refresh", elem_id="dashboard-refresh")
        summary = gr.Markdown(elem_id="dashboard-summary")
        with gr.Row():
            histogram, over_time = gr.Plot(show_label=False), gr.Plot(show_label=False)
        with gr.Row():
            rates, top = gr.Plot(show_label=False), gr.Plot(show_label=False)
        with gr.Row():
            unreferenced, saved = gr.Plot(show_label=False), gr.Plot(show_label=False)
        with gr.Row():
            unbacked = gr.Plot(show_label=False, elem_id="dashboard-unbacked")
        outputs = [summary, histogram, over_time, rates, top, unreferenced, saved, unbacked]
        refresh.click(self.refresh, None, outputs, api_name="dashboard")
        return outputs

    @shows_refusals
    def refresh(self, request: gr.Request):
        user = self.login.require(request)
        stats, series = self.admin.dashboard_stats(user), self.admin.reply_series(user)
        return (
            summary_markdown(stats, self.admin.engine_summary(user)),
            plots.speedup_histogram(series),
            plots.speedup_over_time(series),
            plots.hit_rates(stats),
            plots.question_bars(stats.top_questions, "Most asked questions"),
            plots.question_bars(stats.top_unreferenced_questions, "Asked with no useful reference"),
            plots.time_saved(series),
            plots.question_bars(stats.top_unbacked_questions, "Asked with no approved answer behind the reply"),
        )


def summary_markdown(stats: DashboardStats, engine: EngineSummary | None = None) -> str:
    """The headline numbers as a small table, with how this replica decodes."""
    def speedup(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "n/a"

    rows = [
        ("Replies served", f"{stats.replies}"),
        ("Cached answers / help articles", f"{stats.entries} / {stats.articles}"),
        ("Exact hits", f"{stats.exact_hits} ({stats.exact_hit_rate:.0%})"),
        ("Replies with a similar past answer as reference", f"{stats.reference_hit_rate:.0%}"),
        ("Replies with no useful reference", f"{stats.replies_without_references}"),
        ("Replies no approved answer backed (staff could write one)",
         f"{stats.replies_not_backed} ({stats.replies_handed_off} handed off: no article either, not decoded)"),
        ("Mean / median speedup", f"{speedup(stats.mean_speedup)} / {speedup(stats.median_speedup)}"),
        ("Time saved against plain greedy decoding", f"{stats.seconds_saved:.1f} s"),
        ("Feedback: thumbs up / down", f"{stats.positive_feedback} / {stats.negative_feedback}"),
    ]
    if engine is not None:
        rows += [("Engine", engine.line), ("Decode step width", step_width_text(engine))]
    return "| Measure | Value |\n|---|---|\n" + "\n".join(f"| {label} | {value} |" for label, value in rows)


def step_width_text(engine: EngineSummary) -> str:
    """This replica's width, and whether it is the one the deployment chose."""
    def width(value: int | None) -> str:
        return f"{value}-wide" if value else "one-token steps"

    if not engine.deployment_chose:
        return f"{width(engine.step_width)} (set on this replica; no width measured for the deployment)"
    if engine.deployment_step_width == engine.step_width:
        return f"{width(engine.step_width)}, the deployment's choice, kept in its database for every replica"
    return (f"{width(engine.step_width)} on this replica (CHATBOT_STEP_WIDTH); the deployment chose "
            f"{width(engine.deployment_step_width)}")
