"""Why targets are missed: for each missed speed target, the run's own measurements that explain it."""

from bench.markdown import section
from bench.results import Results
from bench.summary import break_even_draft, own_answer_split, pass_cost, slowest_question
from bench.targets import CACHE_ASSISTED, NOVEL_WORST, SPEED_TARGET, Target, missed


def shortfall_section(results: Results, targets: dict[str, Target]) -> str:
    """Passes, copies and the cost curve behind each missed target; empty when none is missed."""
    names = missed(targets)
    lines = []
    if names & set(CACHE_ASSISTED):
        lines += cache_assisted_shortfall(results)
    if len(results.cost_curve.sizes) > 1 and names:
        lines.append(cost_curve_note(results))
    if NOVEL_WORST in names and results.row("novel", "llma"):
        lines.append(slowest_novel_note(results))
    return section("Why targets are missed", "\n".join(lines)) if lines else ""


def cache_assisted_shortfall(results: Results) -> list[str]:
    llma, oracle = results.row("cache_assisted", "llma"), results.row("cache_assisted", "oracle")
    if not (llma and oracle):
        return []
    cost, needed = pass_cost(llma), SPEED_TARGET * pass_cost(llma)
    return [
        f"- **Cache-assisted speed is bounded by what the references hold.** LLMA made "
        f"{llma.tokens_per_pass:.2f} tokens per forward pass and copied {llma.mean_copied_share:.0%} of "
        f"each reply; with the exact greedy answer as reference (oracle) the same questions make "
        f"{oracle.tokens_per_pass:.2f} tokens per pass and copy {oracle.mean_copied_share:.0%}. The "
        f"model answers a rewording differently from the cached first wording, so most of a reply is not in "
        f"any reference and no policy can copy it." + own_answer_note(results),
        f"- **What {SPEED_TARGET:g}x would take.** A pass cost LLMA {cost:.2f} one-token steps on average here "
        f"(drafts make passes wider; see the cost curve), so {SPEED_TARGET:g}x needs about {needed:.1f} tokens per "
        f"pass, {needed / llma.tokens_per_pass:.1f} times the {llma.tokens_per_pass:.2f} it made. The oracle "
        f"paid {pass_cost(oracle):.2f} steps per pass.",
    ]


def own_answer_note(results: Results) -> str:
    """LLMA's speedup with and without the group's own cached answer among the references."""
    split = own_answer_split(results, "cache_assisted")
    if split is None:
        return ""
    return (
        f" With the group's own earlier answer among the references LLMA ran {split.with_own:.2f}x "
        f"({split.with_own_questions} questions), without it {split.without:.2f}x ({split.without_questions})."
    )


def cost_curve_note(results: Results) -> str:
    """What a wider forward cost on this run's machine, and how much of its draft must be accepted to pay."""
    wide = {n: r for n, r in results.cost_curve.relative().items() if n > 1}
    costs = ", ".join(f"{n} tokens {r:.2f}x" for n, r in wide.items())
    break_even = ", ".join(f"{break_even_draft(r):.2f} of a {n - 1}-token draft" for n, r in wide.items())
    return (
        f"- **The cost curve.** A forward of several tokens costs (relative to one): {costs}. A pass pays only "
        f"when it accepts more draft tokens than it costs steps beyond one: more than {break_even}."
    )


def slowest_novel_note(results: Results) -> str:
    worst = slowest_question(results, "novel", "llma")
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
