"""The markdown report of a bench run: the sections, in the order render_markdown puts them together.

Targets are in bench/targets.py, why they are missed in bench/shortfall.py, and every figure the sections show is
either a recorded measurement (bench/results.py) or computed from them (bench/summary.py).
"""

import statistics

from bench.markdown import MISSING, cell, fmt, section, table
from bench.peers import PEER_INSTALL
from bench.results import QuestionRecord, Results
from bench.shortfall import shortfall_section
from bench.summary import GroundedSummary, grounded_summaries, peer_summaries, step_flatness
from bench.targets import Target, compute_targets

WORKLOAD_NOTES = {
    "cache_assisted": "later wordings of a paraphrase group; references = answers of the top-k similar cached "
    "questions (the first wordings, answered greedily); no article in the prompt (the paper's setting)",
    "rag": "first wordings with the group's help article in the system message; the article is a reference too",
    "repeat": "a first wording asked again verbatim; reference = its own stored answer",
    "followup": "a follow-up asked as the second turn after the group's first question and its greedy answer; "
    "reference = that earlier answer (it is also in the prompt)",
    "novel": "single-wording groups; references = whatever the cache returns (usually nothing or unrelated answers)",
    "grounded": "the cache-assisted questions with their group's approved answer in the prompt as the app places it "
    "(the cached first wording's greedy answer, approved); references = that answer first, then the usual cache hits",
    "grounded_staff": "the same, but the approved answers are the shipped staff-written ones (data/)",
}
GROUNDED_HEADING = "Grounded workloads (approved answers in the prompt)"
PEER_HEADING = "Peer: llama.cpp on the same GGUF (optional)"


def targets_section(targets: dict[str, Target]) -> str:
    verdict = {True: "**PASS**", False: "**MISS**", None: "not measured"}
    rows = [[t.name, t.goal, t.measured, verdict[t.passed], t.margin] for t in targets.values()]
    return section("Targets", table(["target", "goal", "measured", "result", "margin"], rows))


RESULTS_HEADER = ["workload", "method", "questions", "speedup vs greedy", "vs hf_greedy", "CPU-time speedup",
                  "tokens/s", "tokens/pass", "identical", "worst", "median", "copied"]
RESULTS_INTRO = (
    "Speedups are sums of seconds over the workload's questions (greedy's / the method's); worst and median are "
    "per question; the CPU-time speedup is the same ratio in this process's CPU seconds, which other processes on "
    "a shared machine move less than wall clock (but still move). Tokens per pass counts every forward call, the "
    "prefill included. Copied is the mean share of reply tokens taken from a draft (derived from passes for the HF "
    "methods)."
)


def speedup_cell(value: float | None) -> str:
    return fmt(value, ".2f", "x")


def results_section(results: Results) -> str:
    rows = [
        [r.workload, r.method, str(r.questions), speedup_cell(r.speedup_vs_greedy),
         speedup_cell(r.speedup_vs_hf_greedy), speedup_cell(r.cpu_speedup_vs_greedy), fmt(r.tokens_per_s, ".1f"),
         fmt(r.tokens_per_pass), fmt(r.identical_share, ".0%"), speedup_cell(r.worst_speedup),
         speedup_cell(r.median_speedup), fmt(r.mean_copied_share, ".0%")]
        for r in results.rows
    ]
    return section("Results", RESULTS_INTRO, table(RESULTS_HEADER, rows))


PROMPT_LOOKUP_NOTE = (
    "`hf_prompt_lookup` is transformers' prompt lookup decoding: it only searches the input ids, so on the cache "
    "workloads (cache_assisted, repeat, novel) it cannot see the references and runs on the plain prompt, which is "
    "how a user would reach for it. On rag and followup the article or earlier answer is in the prompt."
)


def workloads_section(results: Results) -> str:
    limited = (
        f"With --limit the cache holds only the {results.settings.cache_entries} answers the selected questions "
        "need, so retrieval meets fewer unrelated answers than in a full run."
        if results.settings.limit is not None else ""
    )
    bullets = "\n".join(workload_line(results, w) for w in results.workloads)
    return section("Workloads", bullets, PROMPT_LOOKUP_NOTE, limited)


def workload_line(results: Results, workload: str) -> str:
    records = results.questions_of(workload)
    grounded = workload in results.grounded_workloads()
    return (f"- **{workload}** ({len(records)} questions): {WORKLOAD_NOTES.get(workload, '')}."
            + grounding_note(records, grounded) + retrieval_note(records))


def grounding_note(records: list[QuestionRecord], grounded_workload: bool) -> str:
    """How many questions had an approved answer in the prompt, and how many the chat service would have found."""
    if not grounded_workload:
        return ""
    grounded = [q for q in records if q.is_grounded()]
    found = sum(bool(q.references[0].retrieved) for q in grounded)
    return (f" Grounded: {len(grounded)}/{len(records)}, each with its own group's approved answer; the chat "
            f"service's match and consistency check would have picked it for {found}/{len(grounded)}.")


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
    rows = [
        [s.workload, str(s.questions), str(s.grounded), fmt(s.greedy_tokens_per_s, ".1f"), speedup_cell(s.speedup),
         speedup_cell(s.end_to_end_speedup), fmt(s.copied_from_approved, ".0%"), worst_entry(s), str(s.mismatches)]
        for s in summaries
    ]
    return section(GROUNDED_HEADING, grounded_intro(results.settings.grounding), table(GROUNDED_HEADER, rows))


def grounded_intro(grounding: dict) -> str:
    rule = (
        f"fused score >= {grounding['threshold']}, at most {grounding['answers']} answer(s) within "
        f"{grounding['token_budget']} tokens, " if grounding else ""
    )
    return (
        "The cache-assisted questions again (no help article), each with its own group's approved answer placed "
        "where the chat service places it (its default prompt layout; the Workloads section says how often the "
        f"service's own lookup, {rule}the chat service's defaults, would have found that answer). LLMA is measured "
        "against greedy on the same prompt (the speedup the product reports) and end to end against greedy on the "
        "plain prompt, run in the same round, so the longer prompt's prefill counts against LLMA. Both are sums of "
        "seconds over all the workload's questions (llma); copied is the mean share of a grounded reply that llma "
        "copied from the approved answer (its first reference, or its places in the prompt); mismatches count every "
        "LLMA method."
    )


def worst_entry(summary: GroundedSummary) -> str:
    if summary.worst_question is None:
        return MISSING
    return f"{speedup_cell(summary.worst_end_to_end)} \"{cell(summary.worst_question)}\""


PEER_HEADER = ["workload", "questions", "llama.cpp tokens/s", "greedy tokens/s (this engine)", "hf_greedy tokens/s",
               "same reply as greedy"]


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
    return section(PEER_HEADING, peer_intro(results), table(PEER_HEADER, rows))


def peer_intro(results: Results) -> str:
    version = f" {results.machine.llama_cpp}" if results.machine.llama_cpp else ""
    return (
        f"The peer row, run wherever llama-cpp-python is installed ({PEER_INSTALL}, compiling llama.cpp once): "
        f"llama.cpp's greedy decoding through llama-cpp-python{version}, on the bundled Q4_1 GGUF file this engine's "
        f"{weights_text(results.model)} weights were read from, fed the same prompt token ids, "
        f"with the bench's {results.machine.torch_threads} threads. Tokens per second are summed over the same "
        "questions for all three. llama.cpp multiplies by the 4-bit weights with its own kernels, so its reply may "
        "differ from greedy's at near-ties: that is no LLMA mismatch and counts in no target."
    )


def grid_section(results: Results) -> str:
    cells = results.grid
    if not cells or all(c.speedup is None for c in cells):
        return section("n-by-k grid", "Not run (no cache-assisted questions or --grid-questions 0).")
    copy_lens = sorted({c.copy_len for c in cells})
    match_lens = sorted({c.match_len for c in cells})
    by_cell = {(c.match_len, c.copy_len): c for c in cells}
    header = ["", *(f"k={k}" for k in copy_lens)]
    speedups = [[f"n={n}"] + [speedup_entry(by_cell[n, k].speedup, by_cell[n, k].cpu_speedup) for k in copy_lens]
                for n in match_lens]
    per_pass = [[f"n={n}"] + [fmt(by_cell[n, k].tokens_per_pass) for k in copy_lens] for n in match_lens]
    intro = (
        f"FixedCopyPolicy(match_len=n, copy_len=k) on the first {results.settings.grid_questions} cache-assisted "
        "questions, like the paper's figure. Speedup over greedy, wall clock (CPU time):"
    )
    return section("n-by-k grid", intro, table(header, speedups), "Tokens per forward pass (the same on any machine):",
                   table(header, per_pass))


def speedup_entry(wall: float | None, cpu: float | None) -> str:
    return f"{speedup_cell(wall)} ({speedup_cell(cpu)})"


def cost_section(results: Results) -> str:
    curve = results.cost_curve
    points = zip(curve.sizes, curve.seconds, curve.relative().values(), strict=True)
    rows = [[str(n), f"{s * 1000:.1f}", f"{r:.2f}"] for n, s, r in points]
    intro = (
        f"Seconds of one forward of n new tokens over a {curve.context_len}-token KV cache, as "
        "`decoding.measure_cost_curve` measured them at the start of the run: what one verification costs, "
        "and the curve the default policy plans with."
    )
    return section("Forward cost curve", intro, table(["tokens", "ms", "relative to 1 token"], rows),
                   flatness_note(results), step_cost_table(results))


def step_cost_table(results: Results) -> str:
    """The engine's W-wide step against one-token steps, measured side by side at the start of the run."""
    if not results.step_costs:
        return ""
    sizes = sorted({n for cost in results.step_costs for n in cost.sizes})
    rows = [
        [cost.label, *(f"{dict(zip(cost.sizes, cost.ms, strict=True)).get(n, '')}" for n in sizes)]
        for cost in results.step_costs
    ]
    intro = (
        f"ms of one decode forward of n new tokens over a {results.cost_curve.context_len}-token cache, per engine "
        "configuration (the fastest of several rounds, measured side by side at the start of the run). With W-wide "
        "steps every forward, a plain greedy step included, is W tokens wide. The packed forward's row of n rows "
        "shows how flat its cost is; the transformers rows are its forward of the same weights and, in fp32, what "
        "`hf_greedy` runs."
    )
    return intro + "\n\n" + table(["configuration", *(f"{n} tokens" for n in sizes)], rows)


def flatness_note(results: Results) -> str:
    """What one W-row packed forward cost against a one-row one on this run's machine."""
    flat = step_flatness(results)
    if flat is None:
        return ""
    return (
        f"The engine's {flat.width}-row forward costs {flat.ratio:.2f}x a one-row forward of the same packed weights "
        f"({flat.width_ms} ms against {flat.one_row_ms} ms). Every forward reads all weights once, whatever its "
        "rows; each row adds its own products, attention over the context and a row of the LM head: here each row "
        f"beyond the first added {flat.per_extra_row_ms:.2f} ms, {flat.per_extra_row_ms / flat.one_row_ms:.0%} of a "
        "one-row forward."
    )


def weights_text(model) -> str:
    """"bfloat16" or "int4 (bfloat16 activations)": how the engine held the weights."""
    dtype = model.dtype.removeprefix("torch.")
    return dtype if model.weights == "dense" else f"{model.weights} ({dtype} activations)"


def header_section(results: Results) -> str:
    s, m, model = results.settings, results.machine, results.model
    phases = ", ".join(f"{name} {secs:.0f} s" for name, secs in results.phase_seconds.items())
    steps = f"{model.step_width}-wide decode steps" if model.step_width else "one-token decode steps"
    if model.step_width and not model.padded_steps:
        steps += " (short ones unpadded)"
    hf = f", transformers generate (hf_*) in {model.hf_dtype}" if model.hf_dtype else ""
    weights = f", {model.weights} weights" if model.weights != "dense" else ""
    if model.kernel_paths:
        weights += f", the lane library's {model.kernel_paths} paths"
        weights += " (the LM head's product too)" if model.lane_head else ""
    lines = [
        "# LLMA benchmark",
        "",
        f"- Model: {model.id}; this engine in {model.dtype} on the {model.forward} forward{weights} with {steps}{hf}; "
        "at most "
        f"{s.max_new_tokens} new tokens per reply.",
        f"- Decoding rule of greedy and LLMA: {rule_text(s.repetition)}; hf_* decode plain greedy.",
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
        section("Plots", "\n".join(f"![{name}]({name})" for name in plot_names)),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


# Each part of the rule, by the setting that switches it on, and the settings it reads.
RULE_PARTS = {
    "no_repeat_ngram": ("no_repeat_ngram",),
    "dry_multiplier": ("dry_multiplier", "dry_base", "dry_allowed_length"),
    "stop_ngram": ("stop_ngram",),
    "end_bonus": ("end_after", "end_bonus"),
    "ground_numbers": ("ground_numbers",),
}


def rule_text(repetition: dict) -> str:
    """The repetition rule in words: what greedy and LLMA both decoded under."""
    shown = [key for switch, keys in RULE_PARTS.items() if repetition.get(switch) for key in keys]
    if not shown:
        return "plain greedy"
    return "greedy with " + ", ".join(f"{key}={repetition[key]}" for key in shown)
