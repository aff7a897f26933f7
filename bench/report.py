"""The markdown report of a bench run: targets, why any are missed, result tables, workloads, grid, cost curve."""

import statistics
from dataclasses import dataclass

from bench.methods import LLMA_METHODS
from bench.peers import PEER_INSTALL
from bench.results import (
    GroundedSummary,
    PeerSummary,
    QuestionRecord,
    Results,
    speedup,
    summarize_grounded,
    summarize_peer,
)

WORKLOAD_NOTES = {
    "cache_assisted": "later wordings of a paraphrase group; references = answers of the top-k similar cached "
    "questions (the first wordings, answered greedily); no article in the prompt (the paper's setting)",
    "rag": "first wordings with the group's help article in the system message; the article is a reference too",
    "repeat": "a first wording asked again verbatim; reference = its own stored answer",
    "followup": "a follow-up asked as the second turn after the group's first question and its greedy answer; "
    "reference = that earlier answer (it is also in the prompt)",
    "novel": "single-wording groups; references = whatever the cache returns (usually nothing or unrelated answers)",
    "grounded": "the cache-assisted questions with their group's approved answer in the system message (the "
    "cached first wording's greedy answer, approved); references = that answer first, then the usual cache hits",
    "grounded_staff": "the same, but the approved answers are the shipped staff-written ones (data/)",
}
SPEED_TARGET = 3.0  # LLMA over greedy on cache-assisted questions
GROUNDED_TARGET = 2.0  # LLMA on grounded questions, over greedy on the same prompt and end to end
GROUNDED_HEADING = "Grounded workloads (approved answers in the prompt)"
PEER_HEADING = "Peer: llama.cpp on the same GGUF (optional)"
NOVEL_WORST = "LLMA worst per-question speedup, novel"


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool | None  # None when the run did not measure it
    margin: str


# --- targets ------------------------------------------------------------------------------------


def row_speedup(results: Results, workload: str, method: str) -> float | None:
    row = results.row(workload, method)
    return row.speedup_vs_greedy if row else None


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


def identity_target(results: Results) -> Target:
    runs = sum(r.questions for r in results.rows if r.method in LLMA_METHODS)
    wrong = len(results.llma_mismatches())
    return Target(
        "every LLMA output equals greedy's", "100% identical", f"{runs - wrong}/{runs} identical",
        wrong == 0 and runs > 0, f"{wrong} mismatching",
    )


def grounded_summaries(results: Results) -> list[GroundedSummary]:
    """One summary per grounded workload the run measured (none for runs from before grounding)."""
    return [summarize_grounded(w, results.questions_of(w)) for w in results.grounded_workloads()]


def grounded_targets(results: Results) -> list[Target]:
    """LLMA >= 2x on each grounded workload, on the same prompt and end to end, and every reply identical."""
    measured = {s.workload: s for s in grounded_summaries(results) if s.questions}
    targets = []
    for workload in ("grounded", "grounded_staff"):
        summary = measured.get(workload)
        same, end_to_end = (summary.speedup, summary.end_to_end_speedup) if summary else (None, None)
        goal = f">= {GROUNDED_TARGET:g}x"
        targets += [
            level_target(f"LLMA over greedy on the same prompt, {workload}", same, GROUNDED_TARGET, goal),
            level_target(f"LLMA end to end vs the plain prompt's greedy, {workload}", end_to_end, GROUNDED_TARGET,
                         goal),
        ]
    runs = sum(r.questions for r in results.rows if r.method in LLMA_METHODS and r.workload in measured)
    wrong = sum(s.mismatches for s in measured.values())
    targets.append(Target(
        "every LLMA output equals greedy's, grounded", "100% identical", f"{runs - wrong}/{runs} identical",
        wrong == 0 and runs > 0 if measured else None, f"{wrong} mismatching",
    ))
    return targets


def compute_targets(results: Results) -> list[Target]:
    def cache_assisted(method: str) -> float | None:
        return row_speedup(results, "cache_assisted", method)

    llma = cache_assisted("llma")
    novel = results.row("novel", "llma")
    return [
        level_target("LLMA speedup over greedy, cache-assisted", llma, SPEED_TARGET, ">= 3x"),
        ratio_target("LLMA vs llma_paper, cache-assisted", llma, cache_assisted("llma_paper"), 1.0, "faster"),
        ratio_target("LLMA vs hf_prompt_lookup, cache-assisted", llma, cache_assisted("hf_prompt_lookup"), 1.0,
                     "faster"),
        ratio_target("LLMA share of the oracle's speedup, cache-assisted", llma, cache_assisted("oracle"), 0.8,
                     ">= 80%"),
        level_target(NOVEL_WORST, novel.worst_speedup if novel else None, 0.95, ">= 0.95x"),
        *grounded_targets(results),
        identity_target(results),
    ]


# --- why targets are missed ---------------------------------------------------------------------


def shortfall_section(results: Results, targets: list[Target]) -> str:
    """For each missed speed target, the measurements that explain it: passes, copies, the cost curve."""
    missed = {t.name for t in targets if t.passed is False}
    lines = []
    if any("cache-assisted" in name for name in missed):
        lines += cache_assisted_shortfall(results)
    if len(results.cost_curve.sizes) > 1 and missed:
        lines.append(cost_curve_note(results))
    if NOVEL_WORST in missed and results.row("novel", "llma"):
        lines.append(slowest_novel_note(results))
    return "## Why targets are missed\n\n" + "\n".join(lines) if lines else ""


def cache_assisted_shortfall(results: Results) -> list[str]:
    llma, oracle = results.row("cache_assisted", "llma"), results.row("cache_assisted", "oracle")
    if not (llma and oracle):
        return []
    # A pass that yields t tokens and costs c one-token steps gives t / c; the implied mean cost per pass.
    cost = llma.tokens_per_pass / llma.speedup_vs_greedy
    oracle_cost = oracle.tokens_per_pass / oracle.speedup_vs_greedy
    return [
        f"- **Cache-assisted speed is bounded by what the references hold.** LLMA made "
        f"{llma.tokens_per_pass:.2f} tokens per forward pass and copied {llma.mean_copied_share:.0%} of "
        f"each reply; with the exact greedy answer as reference (oracle) the same questions make "
        f"{oracle.tokens_per_pass:.2f} tokens per pass and copy {oracle.mean_copied_share:.0%}. The "
        f"model answers a rewording differently from the cached first wording, so most of a reply is not in "
        f"any reference and no policy can copy it." + own_answer_note(results),
        f"- **What 3x would take.** A pass cost LLMA {cost:.2f} one-token steps on average here (drafts make "
        f"passes wider; see the cost curve), so 3x needs about {SPEED_TARGET * cost:.1f} tokens per pass, "
        f"{SPEED_TARGET * cost / llma.tokens_per_pass:.1f} times the {llma.tokens_per_pass:.2f} it made. The oracle "
        f"paid {oracle_cost:.2f} steps per pass.",
    ]


def own_answer_note(results: Results) -> str:
    """LLMA's speedup with and without the group's own cached answer among the references."""
    questions = results.questions_of("cache_assisted")
    own = [q for q in questions if q.has_own_answer()]
    others = [q for q in questions if not q.has_own_answer()]
    if not own or not others:
        return ""
    return (
        f" With the group's own earlier answer among the references LLMA ran {questions_speedup(own, 'llma'):.2f}x "
        f"({len(own)} questions), without it {questions_speedup(others, 'llma'):.2f}x ({len(others)})."
    )


def questions_speedup(questions: list[QuestionRecord], method: str) -> float:
    return speedup([q.run("greedy") for q in questions], [q.run(method) for q in questions])


def cost_curve_note(results: Results) -> str:
    wide = ", ".join(f"{n} tokens {r:.2f}x" for n, r in results.cost_curve.relative().items() if n > 1)
    return (
        f"- **The cost curve.** A forward of several tokens costs (relative to one): {wide}. On this CPU a draft "
        "pays only when most of it is accepted, whereas the paper's GPU verifies a few extra tokens almost "
        "for free."
    )


def slowest_novel_note(results: Results) -> str:
    worst = min(results.questions_of("novel"), key=lambda q: q.speedup("llma") or float("inf"))
    run = worst.run("llma")
    twin = results.row("novel", "hf_greedy")  # the same work as greedy: its spread is timing noise
    noise = (
        f" Timing noise alone: hf_greedy, which does greedy's work, had a worst of {twin.worst_speedup:.2f}x "
        "on the same questions." if twin else ""
    )
    return (
        f"- **Slowest novel question:** \"{worst.question}\" at {worst.speedup('llma'):.2f}x: "
        f"{run.tokens} tokens in {run.forward_passes} passes, {run.copied_tokens} copied. A rejected "
        f"draft costs a wider forward for no token.{noise}"
    )


# --- tables and sections ------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def targets_section(targets: list[Target]) -> str:
    verdict = {True: "**PASS**", False: "**MISS**", None: "not measured"}
    rows = [[t.name, t.goal, t.measured, verdict[t.passed], t.margin] for t in targets]
    return "## Targets\n\n" + table(["target", "goal", "measured", "result", "margin"], rows)


RESULTS_HEADER = ["workload", "method", "questions", "speedup vs greedy", "vs hf_greedy", "CPU-time speedup",
                  "tokens/s", "tokens/pass", "identical", "worst", "median", "copied"]


def results_section(results: Results) -> str:
    rows = [
        [r.workload, r.method, str(r.questions), fmt(r.speedup_vs_greedy, ".2f", "x"),
         fmt(r.speedup_vs_hf_greedy, ".2f", "x"), fmt(r.cpu_speedup_vs_greedy, ".2f", "x"),
         fmt(r.tokens_per_s, ".1f"), fmt(r.tokens_per_pass),
         fmt(r.identical_share, ".0%"), fmt(r.worst_speedup, ".2f", "x"), fmt(r.median_speedup, ".2f", "x"),
         fmt(r.mean_copied_share, ".0%")]
        for r in results.rows
    ]
    return (
        "## Results\n\nSpeedups are sums of seconds over the workload's questions (greedy's / the method's); worst and "
        "median are per question; the CPU-time speedup is the same ratio in this process's CPU seconds, which other "
        "processes on a shared machine move less than wall clock (but still move). Tokens per pass counts every "
        "forward call, the prefill included. Copied is the mean share of reply tokens taken from a draft (derived "
        "from passes for the HF methods).\n\n"
        + table(RESULTS_HEADER, rows)
    )


def workloads_section(results: Results) -> str:
    lines = ["## Workloads", ""]
    for workload in results.workloads:
        records = results.questions_of(workload)
        lines.append(f"- **{workload}** ({len(records)} questions): {WORKLOAD_NOTES.get(workload, '')}."
                     + grounding_note(records, workload in results.grounded_workloads()) + retrieval_note(records))
    lines.append(
        "\n`hf_prompt_lookup` is transformers' prompt lookup decoding: it only searches the input ids, so on the cache "
        "workloads (cache_assisted, repeat, novel) it cannot see the references and runs on the plain prompt, which is "
        "how a user would reach for it. On rag and followup the article or earlier answer is in the prompt."
    )
    if results.settings.limit is not None:
        lines.append(
            f"\nWith --limit the cache holds only the {results.settings.cache_entries} answers the selected "
            "questions need, so retrieval meets fewer unrelated answers than in a full run."
        )
    return "\n".join(lines)


def grounding_note(records: list[QuestionRecord], grounded_workload: bool) -> str:
    """How many questions had an approved answer in the prompt, and how many the chat service would have found."""
    if not grounded_workload:
        return ""
    grounded = [q for q in records if q.is_grounded()]
    found = sum(bool(q.references[0].retrieved) for q in grounded)
    return (f" Grounded: {len(grounded)}/{len(records)}, each with its own group's approved answer; the chat "
            f"service's lookup (cosine >= its grounding threshold) would have picked it for {found}/{len(grounded)}.")


def retrieval_note(records: list[QuestionRecord]) -> str:
    hits = [[ref for ref in q.references if ref.kind == "cache"] for q in records]
    if not any(hits):
        return " The cache returned no references." if records and records[0].references == [] else ""
    own = sum(any(ref.same_group for ref in refs) for refs in hits)
    mean_refs = statistics.mean(len(refs) for refs in hits)
    return f" Retrieval: {mean_refs:.1f} references per question; the group's own answer among them: {own}/{len(hits)}."


GROUNDED_HEADER = ["workload", "questions", "grounded", "greedy tokens/s", "LLMA vs greedy, same prompt",
                   "end to end vs plain greedy", "copied from approved", "worst question (end to end)", "mismatches"]


def grounded_section(results: Results) -> str:
    """Per grounded workload: LLMA on the grounded prompt against greedy on it and against the plain prompt."""
    summaries = grounded_summaries(results)
    if not summaries:
        return ""
    grounding = results.settings.grounding
    rule = (
        f"cosine similarity >= {grounding['threshold']}, at most {grounding['answers']} answer(s) within "
        f"{grounding['token_budget']} tokens, " if grounding else ""
    )
    rows = [
        [s.workload, str(s.questions), str(s.grounded), fmt(s.greedy_tokens_per_s, ".1f"), fmt(s.speedup, ".2f", "x"),
         fmt(s.end_to_end_speedup, ".2f", "x"), fmt(s.copied_from_approved, ".0%"), worst_entry(s), str(s.mismatches)]
        for s in summaries
    ]
    return (
        f"## {GROUNDED_HEADING}\n\nThe cache-assisted questions again (no help article), each with its own "
        "group's approved answer in the system message under the chat service's approved-answer header (the "
        f"Workloads section says how often the service's own lookup, {rule}the chat service's defaults, would "
        "have found that answer). LLMA is "
        "measured against greedy on the same prompt (the speedup the product reports) and end to end against "
        "greedy on the plain prompt, "
        "run in the same round, so the longer prompt's prefill counts against LLMA. Both are sums of seconds over "
        "all the workload's questions (llma); copied is the mean share of a grounded reply that llma copied from "
        "the approved answer (its first reference); mismatches count every LLMA method.\n\n"
        + table(GROUNDED_HEADER, rows)
    )


PEER_HEADER = ["workload", "questions", "llama.cpp tokens/s", "greedy tokens/s (this engine)", "hf_greedy tokens/s",
               "same reply as greedy"]


def peer_summaries(results: Results) -> list[PeerSummary]:
    """Per workload and over all questions, each peer against greedy and hf_greedy; none without --peers."""
    return [
        summarize_peer(workload, method, results.questions if workload == "all" else results.questions_of(workload))
        for method in results.peer_methods()
        for workload in [*results.workloads, "all"]
    ]


def peer_section(results: Results) -> str:
    """The optional peer row: llama.cpp's greedy tokens/s next to this engine's and transformers'."""
    summaries = [s for s in peer_summaries(results) if s.questions]
    if not summaries:
        return ""
    rows = [
        [s.workload, str(s.questions), fmt(s.tokens_per_s, ".1f"), fmt(s.greedy_tokens_per_s, ".1f"),
         fmt(s.hf_greedy_tokens_per_s, ".1f"), fmt(s.same_reply_share, ".0%")]
        for s in summaries
    ]
    version = f" {results.machine.llama_cpp}" if results.machine.llama_cpp else ""
    return (
        f"## {PEER_HEADING}\n\nAn optional peer row, run only when asked for with {PEER_INSTALL} (compiling "
        f"llama.cpp once): llama.cpp's greedy decoding through llama-cpp-python{version}, on the bundled Q4_1 GGUF "
        f"file this engine's {results.model.dtype.removeprefix('torch.')} weights were dequantized from, fed the "
        "same prompt token ids, with "
        f"the bench's {results.machine.torch_threads} threads. Tokens per second are summed over the same "
        "questions for all three. llama.cpp multiplies by the 4-bit weights with its own kernels, so its reply may "
        "differ from greedy's at near-ties: that is no LLMA mismatch and counts in no target.\n\n"
        + table(PEER_HEADER, rows)
    )


def worst_entry(summary: GroundedSummary) -> str:
    if summary.worst_question is None:
        return "–"
    question = summary.worst_question.replace("|", "\\|")  # a pipe would end the table cell
    return f"{fmt(summary.worst_end_to_end, '.2f', 'x')} \"{question}\""


def grid_section(results: Results) -> str:
    cells = results.grid
    if not cells or all(c.speedup is None for c in cells):
        return "## n-by-k grid\n\nNot run (no cache-assisted questions or --grid-questions 0)."
    copy_lens = sorted({c.copy_len for c in cells})
    match_lens = sorted({c.match_len for c in cells})
    by_cell = {(c.match_len, c.copy_len): c for c in cells}
    header = ["", *(f"k={k}" for k in copy_lens)]
    speedups = [[f"n={n}"] + [speedup_entry(by_cell[n, k].speedup, by_cell[n, k].cpu_speedup) for k in copy_lens]
                for n in match_lens]
    per_pass = [[f"n={n}"] + [fmt(by_cell[n, k].tokens_per_pass) for k in copy_lens] for n in match_lens]
    return (
        "## n-by-k grid\n\nFixedCopyPolicy(match_len=n, copy_len=k) on the first "
        f"{results.settings.grid_questions} cache-assisted questions, like the paper's figure. Speedup over "
        "greedy, wall clock (CPU time):\n\n" + table(header, speedups)
        + "\n\nTokens per forward pass (the same on any machine):\n\n" + table(header, per_pass)
    )


def speedup_entry(wall: float | None, cpu: float | None) -> str:
    return f"{fmt(wall, '.2f', 'x')} ({fmt(cpu, '.2f', 'x')})"


def cost_section(results: Results) -> str:
    curve = results.cost_curve
    points = zip(curve.sizes, curve.seconds, curve.relative().values(), strict=True)
    rows = [[str(n), f"{s * 1000:.1f}", f"{r:.2f}"] for n, s, r in points]
    intro = (
        f"Seconds of one forward of n new tokens over a {curve.context_len}-token KV cache, as "
        "`decoding.measure_cost_curve` measured them at the start of the run: what one verification costs, "
        "and the curve the default policy plans with."
    )
    return f"## Forward cost curve\n\n{intro}\n\n" + table(["tokens", "ms", "relative to 1 token"], rows) + (
        step_cost_table(results)
    )


def step_cost_table(results: Results) -> str:
    """The engine's W-wide step against one-token steps, measured side by side at the start of the run."""
    if not results.step_costs:
        return ""
    sizes = sorted({n for cost in results.step_costs for n in cost.sizes})
    rows = [
        [cost.label, *(f"{dict(zip(cost.sizes, cost.ms, strict=True)).get(n, '')}" for n in sizes)]
        for cost in results.step_costs
    ]
    return (
        step_flatness(results)
        + "\n\nms of one decode forward of n new tokens over a 256-token cache, per engine configuration "
        "(fastest of 5, measured side by side at the start of the run). With W-wide steps every forward, a "
        "plain greedy step included, is W tokens wide. The packed forward's row of n rows shows how flat its "
        "cost is; the transformers rows are its forward of the same weights and, in fp32, what `hf_greedy` "
        "runs.\n\n"
        + table(["configuration", *(f"{n} tokens" for n in sizes)], rows)
    )


def step_flatness(results: Results) -> str:
    """What one W-row packed forward costs against a one-row one, and what bounds it."""
    width = results.model.step_width
    rows = next((c for c in results.step_costs if "one forward of n rows" in c.label), None)
    if rows is None or not width or width not in rows.sizes or 1 not in rows.sizes:
        return ""
    ms = dict(zip(rows.sizes, rows.ms, strict=True))
    ratio = ms[width] / ms[1]
    return (
        f"\n\nThe engine's {width}-row forward costs {ratio:.2f}x a one-row forward of the same packed weights "
        f"({ms[width]} ms against {ms[1]} ms). Every forward reads all weights once, whatever its rows; each row "
        "adds its own products, attention over the context and a row of the 49k-word LM head, which a CPU without "
        "AMX does not hide behind the weight reads (on AMX, 8-16 rows cost about one)."
    )


def header_section(results: Results) -> str:
    s, m, model = results.settings, results.machine, results.model
    phases = ", ".join(f"{name} {secs:.0f} s" for name, secs in results.phase_seconds.items())
    lines = [
        "# LLMA benchmark",
        "",
        f"- Model: {model.id}; this engine in {model.dtype} on the {model.forward} forward with "
        f"{f'{model.step_width}-wide decode steps' if model.step_width else 'one-token decode steps'}"
        f"{f', transformers generate (hf_*) in {model.hf_dtype}' if model.hf_dtype else ''}; at most "
        f"{s.max_new_tokens} new tokens per reply.",
        f"- CPU: {m.cpu_model or m.processor} ({', '.join(m.cpu_flags) or 'flags not recorded'}).",
        f"- Questions: at most {s.limit} per workload, each method's fastest of {s.repeats} round(s); "
        f"cache k={s.k}, threshold {s.threshold}, {s.cache_entries} stored answers.",
        f"- Machine: {m.platform}, {m.cpu_count} CPUs, {m.torch_threads} torch threads, "
        f"OMP_WAIT_POLICY={m.omp_wait_policy or 'unset (OpenMP default)'}; "
        f"load average {m.load_average_at_start[0]:.1f} at start, {m.load_average_at_end[0]:.1f} at end.",
        f"- Took {results.wall_seconds:.0f} s: {phases}.",
    ]
    return "\n".join(lines) + busy_machine_note(results)


def busy_machine_note(results: Results) -> str:
    machine = results.machine
    load = machine.busiest_load()
    if load <= machine.cpu_count:
        return ""
    return (
        f"\n\n> **Busy machine:** load average {load:.1f} on {machine.cpu_count} CPUs. Wall-clock speedups are "
        "noisy; compare them with the CPU-time column."
    )


def mismatch_lines(results: Results) -> list[str]:
    """One line per question an LLMA method did not decode exactly as greedy did (empty when lossless)."""
    return [f"- {m.method} on {m.workload}: {m.question}" for m in results.llma_mismatches()]


def mismatch_warning(results: Results) -> str:
    lines = mismatch_lines(results)
    if not lines:
        return ""
    return "> **WARNING: LLMA output differs from greedy decoding (not lossless):**\n>\n" + "\n".join(
        f"> {line}" for line in lines
    )


def render_markdown(results: Results, plot_names: list[str]) -> str:
    targets = compute_targets(results)
    sections = [
        header_section(results),
        mismatch_warning(results),
        targets_section(targets),
        shortfall_section(results, targets),
        results_section(results),
        grounded_section(results),
        peer_section(results),
        workloads_section(results),
        grid_section(results),
        cost_section(results),
        "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in plot_names),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"
