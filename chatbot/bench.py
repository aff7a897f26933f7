"""Benchmark LLMA against greedy and Hugging Face decoding on the helpdesk workloads, side by side.

    python -m chatbot.bench --workload data/questions.jsonl --articles data/articles.json --out results/ \
        [--max-new-tokens 128] [--limit N] [--methods hf_greedy,greedy,...] [--grid-questions 12] [--repeats 1]

Every method decodes the same prompts in the same process, interleaved per question, so machine
noise hits all of them alike. Writes results.json, report.md and PNG plots (chatbot/bench_report.py).
"""

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from cache import AnswerCache, Embedder, NewAnswer
from chatbot.bench_report import write_report
from chatbot.prompt import DEFAULT_SYSTEM_PROMPT, Turn, build_prompt, context_key, prompt_hash
from data import DATA_DIR, Question, group_questions, load_articles, load_questions
from decoding import (
    AdaptiveCopyPolicy,
    FixedCopyPolicy,
    LlmaOptions,
    greedy_generate,
    llma_generate,
    load_model,
    measure_cost_curve,
)

WORKLOADS = ("cache_assisted", "rag", "repeat", "followup", "novel")
METHODS = ("hf_greedy", "greedy", "hf_prompt_lookup", "llma_paper", "llma", "oracle")
LLMA_METHODS = ("llma_paper", "llma", "oracle")
PAPER_POLICY = FixedCopyPolicy(match_len=1, copy_len=15)
GRID_MATCH_LENS = (1, 2, 3, 4)
GRID_COPY_LENS = (2, 4, 8, 16, 32)
GRID_CELLS = [(n, k) for n in GRID_MATCH_LENS for k in GRID_COPY_LENS]
MAX_PROMPT_TOKENS = 2048


# --- what a run produces ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """Where one reference of an item came from (a cache hit, an article, an earlier answer)."""

    kind: str  # "cache", "article", "stored_answer", "earlier_answer"
    tokens: int
    score: float | None = None  # cosine similarity, for cache hits
    question: str = ""  # the stored question, for cache hits
    same_group: bool = True  # a wording of the same need (always true except for cache hits)


@dataclass(frozen=True)
class Item:
    """One prompt to decode, with the references LLMA may copy from (best first)."""

    workload: str
    group: str
    question: str
    prompt_ids: list[int]
    references: list[list[int]]
    sources: list[Reference]


@dataclass
class Decoded:
    tokens: list[int]
    copied_tokens: int | None  # None where the method does not report it


@dataclass
class MethodRun:
    """One method on one question."""

    method: str
    seconds: float  # wall clock
    cpu_seconds: float  # CPU time of this process: less moved than wall clock by other processes' work
    tokens: int
    forward_passes: int
    copied_tokens: int
    identical: bool  # the same tokens as greedy decoding


@dataclass
class QuestionRecord:
    workload: str
    group: str
    question: str
    prompt_tokens: int
    references: list[Reference]
    greedy_text: str
    runs: list[MethodRun]

    def run(self, method: str) -> MethodRun | None:
        return next((r for r in self.runs if r.method == method), None)


@dataclass
class Row:
    """One method on one workload, summed over its questions."""

    workload: str
    method: str
    questions: int
    tokens: int
    seconds: float
    tokens_per_s: float | None
    speedup_vs_greedy: float | None  # sum of greedy seconds / sum of this method's seconds
    speedup_vs_hf_greedy: float | None
    cpu_speedup_vs_greedy: float | None  # the same in CPU seconds: a cross-check when the machine is noisy
    tokens_per_pass: float | None
    identical_share: float | None
    worst_speedup: float | None  # per question, over greedy
    median_speedup: float | None
    mean_copied_share: float | None
    mismatches: list[str] = field(default_factory=list)  # questions whose tokens differ from greedy's


@dataclass
class GridCell:
    match_len: int  # n
    copy_len: int  # k
    speedup: float | None  # over greedy, wall clock
    cpu_speedup: float | None  # over greedy, CPU time
    tokens_per_pass: float | None
    identical_share: float | None


# --- decoding with each method ------------------------------------------------------------------


class ForwardCounter:
    """Counts the model's top-level forward calls: one per greedy step or per verification."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.count += 1


class Decoder:
    """Runs any method on a prompt with one model, budget and stop token; times and counts each run."""

    def __init__(self, model, eos_token_id: int, max_new_tokens: int, llma_policy: AdaptiveCopyPolicy) -> None:
        self.model = model
        self.eos_token_id = eos_token_id
        self.max_new_tokens = max_new_tokens
        self.llma_policy = llma_policy
        self.forwards = ForwardCounter(model)

    def decode(self, method: str, item: Item, greedy_tokens: list[int]) -> Decoded:
        match method:
            case "hf_greedy":
                return self.hf(item.prompt_ids)
            case "hf_prompt_lookup":  # sees the prompt only: references are not part of it
                return self.hf(item.prompt_ids, prompt_lookup_num_tokens=10)
            case "greedy":
                return self.greedy(item.prompt_ids)
            case "llma_paper":
                return self.llma(item.prompt_ids, item.references, PAPER_POLICY)
            case "llma":
                return self.llma(item.prompt_ids, item.references, self.llma_policy)
            case "oracle":
                return self.llma(item.prompt_ids, [greedy_tokens], self.llma_policy)
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")

    def hf(self, prompt_ids: list[int], **options) -> Decoded:
        ids = torch.tensor([prompt_ids])  # (1, T)
        out = self.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens, do_sample=False,
            eos_token_id=self.eos_token_id, pad_token_id=self.eos_token_id, **options,
        )
        return Decoded(out[0, len(prompt_ids) :].tolist(), copied_tokens=None)

    def greedy(self, prompt_ids: list[int]) -> Decoded:
        result = greedy_generate(self.model, prompt_ids, self.max_new_tokens, self.eos_token_id)
        return Decoded(result.tokens, copied_tokens=0)

    def llma(self, prompt_ids: list[int], references: list[list[int]], policy) -> Decoded:
        result = llma_generate(
            self.model, prompt_ids, references, policy, LlmaOptions(self.max_new_tokens, self.eos_token_id)
        )
        return Decoded(result.tokens, result.copied_tokens)

    def measure(
        self, method: str, decode: Callable[[], Decoded], greedy_tokens: list[int] | None
    ) -> tuple[MethodRun, list[int]]:
        """Time one decode; `greedy_tokens` None means this run is greedy itself."""
        passes_before = self.forwards.count
        start, cpu_start = time.perf_counter(), time.process_time()
        out = decode()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        passes = self.forwards.count - passes_before
        # HF methods do not report copies: every pass yields one token of the model's own plus the accepted ones.
        copied = out.copied_tokens if out.copied_tokens is not None else max(0, len(out.tokens) - passes)
        identical = greedy_tokens is None or out.tokens == greedy_tokens
        return MethodRun(method, seconds, cpu_seconds, len(out.tokens), passes, copied, identical), out.tokens

    def run(self, method: str, item: Item, greedy_tokens: list[int] | None) -> tuple[MethodRun, list[int]]:
        return self.measure(method, lambda: self.decode(method, item, greedy_tokens or []), greedy_tokens)

    def run_policy(self, item: Item, policy: FixedCopyPolicy, greedy_tokens: list[int]) -> MethodRun:
        name = f"n={policy.match_len},k={policy.copy_len}"
        return self.measure(name, lambda: self.llma(item.prompt_ids, item.references, policy), greedy_tokens)[0]


# --- building the workloads ---------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The questions of each workload, each list capped at --limit."""

    cache_assisted: list[Question]
    rag: list[Question]
    repeat: list[Question]
    followup: list[Question]
    novel: list[Question]
    groups: dict[str, list[Question]]

    def first_wording(self, question: Question) -> Question:
        return self.groups[question.group][0]

    def groups_to_store(self) -> list[str]:
        """Groups whose first wording's answer the cache must hold for the selected questions."""
        needed = [q.group for q in [*self.cache_assisted, *self.repeat, *self.followup]]
        return list(dict.fromkeys(needed))


def select_questions(questions: list[Question], articles: dict[str, str], limit: int | None) -> Selection:
    groups = group_questions(questions)
    paraphrased = [g for g in groups.values() if len(g) >= 2 and not g[0].follow_up]
    cap = slice(None, limit)
    return Selection(
        cache_assisted=round_robin([[q for q in g[1:] if not q.follow_up] for g in paraphrased])[cap],
        rag=[g[0] for g in groups.values() if g[0].article in articles and not g[0].follow_up][cap],
        repeat=[g[0] for g in paraphrased][cap],
        followup=round_robin([[q for q in g[1:] if q.follow_up] for g in paraphrased])[cap],
        novel=[g[0] for g in groups.values() if len(g) == 1 and not g[0].follow_up][cap],
        groups=groups,
    )


def round_robin(lists: list[list[Question]]) -> list[Question]:
    """The first item of every list, then every second one, ...: a --limit then covers as many groups as it can."""
    longest = max((len(items) for items in lists), default=0)
    return [items[i] for i in range(longest) for items in lists if i < len(items)]


class Workbench:
    """The answer cache filled with greedy answers to first wordings, and the prompts built on it."""

    def __init__(self, tokenizer, decoder: Decoder, cache: AnswerCache, model_id: str) -> None:
        self.tok = tokenizer
        self.decoder = decoder
        self.cache = cache
        self.model_id = model_id
        self.prompt_hash = prompt_hash(DEFAULT_SYSTEM_PROMPT, [], {"max_new_tokens": decoder.max_new_tokens})
        self.group_of_entry: dict[int, str] = {}

    def prompt(self, question: str, article: str | None = None, history: list[Turn] | None = None) -> list[int]:
        return build_prompt(self.tok, DEFAULT_SYSTEM_PROMPT, article, history or [], question, MAX_PROMPT_TOKENS).ids

    def store_first_wording(self, question: Question) -> None:
        """Answer a group's first wording with greedy decoding (no article) and cache the answer."""
        answer_ids = self.decoder.greedy(self.prompt(question.question)).tokens
        new = NewAnswer(
            question=question.question, answer=self.text(answer_ids), answer_ids=answer_ids, model_id=self.model_id,
            context_key=context_key([]), prompt_hash=self.prompt_hash,
        )
        self.group_of_entry[self.cache.add_answer(new)] = question.group

    def group_of(self, entry_id: int) -> str | None:
        return self.group_of_entry.get(entry_id)

    def stored_answer(self, question: str) -> list[int]:
        found = self.cache.find_exact(question, context_key([]), self.model_id, self.prompt_hash)
        if found is None:
            raise LookupError(f"no stored answer for {question!r}")
        return found.answer_ids

    def text(self, ids: list[int]) -> str:
        return text_of(self.tok, ids)

    def cache_assisted(self, q: Question, workload: str, k: int, threshold: float) -> Item:
        """No article in the prompt; references are the answers to the most similar stored questions."""
        hits = self.cache.lookup(q.question, k=k, threshold=threshold, model_id=self.model_id)
        sources = [
            Reference("cache", len(h.answer_ids), round(h.score, 4), h.question, self.group_of(h.id) == q.group)
            for h in hits
        ]
        return Item(workload, q.group, q.question, self.prompt(q.question), [h.answer_ids for h in hits], sources)

    def rag(self, q: Question, article: str) -> Item:
        """The article is in the system message and is a reference of its own."""
        article_ids = self.tok.encode(article, add_special_tokens=False)
        prompt_ids = self.prompt(q.question, article=article)
        return Item("rag", q.group, q.question, prompt_ids, [article_ids], [Reference("article", len(article_ids))])

    def repeat(self, q: Question) -> Item:
        answer_ids = self.stored_answer(q.question)
        sources = [Reference("stored_answer", len(answer_ids))]
        return Item("repeat", q.group, q.question, self.prompt(q.question), [answer_ids], sources)

    def followup(self, q: Question, first: Question) -> Item:
        """Second turn after the group's first question and its stored greedy answer."""
        answer_ids = self.stored_answer(first.question)
        history = [Turn("user", first.question), Turn("assistant", self.text(answer_ids))]
        prompt_ids = self.prompt(q.question, history=history)
        sources = [Reference("earlier_answer", len(answer_ids))]
        return Item("followup", q.group, q.question, prompt_ids, [answer_ids], sources)


def text_of(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def build_items(
    bench: Workbench, selection: Selection, articles: dict[str, str], k: int, threshold: float
) -> dict[str, list[Item]]:
    return {
        "cache_assisted": [bench.cache_assisted(q, "cache_assisted", k, threshold) for q in selection.cache_assisted],
        "rag": [bench.rag(q, articles[q.article]) for q in selection.rag],
        "repeat": [bench.repeat(q) for q in selection.repeat],
        "followup": [bench.followup(q, selection.first_wording(q)) for q in selection.followup],
        "novel": [bench.cache_assisted(q, "novel", k, threshold) for q in selection.novel],
    }


# --- running ------------------------------------------------------------------------------------


def run_workload(
    decoder: Decoder, items: list[Item], methods: list[str], repeats: int, text: Callable
) -> list[QuestionRecord]:
    """Every method on every question, one question at a time; greedy first (its tokens are the truth)."""
    records = []
    for item in tqdm(items, desc=items[0].workload if items else "empty", unit="question", leave=True):
        others = [m for m in methods if m != "greedy"]
        rounds = []
        for _ in range(repeats):
            greedy_run, greedy_tokens = decoder.run("greedy", item, None)
            rounds.append([greedy_run] + [decoder.run(m, item, greedy_tokens)[0] for m in others])
        records.append(QuestionRecord(
            item.workload, item.group, item.question, len(item.prompt_ids), item.sources, text(greedy_tokens),
            fastest_of(rounds),
        ))
    return records


def fastest_of(rounds: list[list[MethodRun]]) -> list[MethodRun]:
    """Per method, the round with the least wall time: noise from other processes only ever adds time."""
    return [min(same_method, key=lambda run: run.seconds) for same_method in zip(*rounds, strict=True)]


def run_grid(decoder: Decoder, items: list[Item], repeats: int) -> list[GridCell]:
    """The paper's n-by-k figure: FixedCopyPolicy(n, k) against greedy on the same questions."""
    per_question = []  # greedy's run, then one run per cell of GRID_CELLS
    for item in tqdm(items, desc="n-by-k grid", unit="question", leave=True):
        rounds = []
        for _ in range(repeats):
            greedy_run, greedy_tokens = decoder.run("greedy", item, None)
            policies = [FixedCopyPolicy(match_len=n, copy_len=k) for n, k in GRID_CELLS]
            rounds.append([greedy_run] + [decoder.run_policy(item, p, greedy_tokens) for p in policies])
        per_question.append(fastest_of(rounds))
    greedy_runs = [runs[0] for runs in per_question]
    return [grid_cell(n, k, greedy_runs, [runs[i + 1] for runs in per_question]) for i, (n, k) in enumerate(GRID_CELLS)]


def grid_cell(n: int, k: int, greedy_runs: list[MethodRun], runs: list[MethodRun]) -> GridCell:
    if not runs:
        return GridCell(n, k, None, None, None, None)
    speedup = sum(g.seconds for g in greedy_runs) / sum(r.seconds for r in runs)
    cpu_speedup = sum(g.cpu_seconds for g in greedy_runs) / sum(r.cpu_seconds for r in runs)
    passes = sum(r.forward_passes for r in runs)
    tokens = sum(r.tokens for r in runs)
    identical = sum(r.identical for r in runs) / len(runs)
    return GridCell(n, k, speedup, cpu_speedup, tokens / passes if passes else None, identical)


def warm_up(decoder: Decoder, item: Item, methods: list[str]) -> None:
    """One short untimed run of each method: first calls allocate buffers and are slow."""
    short = copy.copy(decoder)  # shares the model and the forward counter
    short.max_new_tokens = min(8, decoder.max_new_tokens)
    greedy_tokens = short.greedy(item.prompt_ids).tokens
    for method in methods:
        short.decode(method, item, greedy_tokens)


# --- summarising --------------------------------------------------------------------------------


def summarize(workload: str, method: str, records: list[QuestionRecord]) -> Row:
    measured = [r for r in records if r.run(method)]
    if not measured:
        return Row(workload, method, 0, 0, 0.0, None, None, None, None, None, None, None, None, None)
    runs = [r.run(method) for r in measured]
    greedy = [r.run("greedy") for r in measured]
    hf_greedy = [r.run("hf_greedy") for r in measured if r.run("hf_greedy")]
    seconds = sum(r.seconds for r in runs)
    tokens = sum(r.tokens for r in runs)
    passes = sum(r.forward_passes for r in runs)
    per_question = [g.seconds / r.seconds for g, r in zip(greedy, runs, strict=True)]
    return Row(
        workload=workload,
        method=method,
        questions=len(runs),
        tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds else None,
        speedup_vs_greedy=sum(g.seconds for g in greedy) / seconds,
        speedup_vs_hf_greedy=sum(h.seconds for h in hf_greedy) / seconds if len(hf_greedy) == len(runs) else None,
        cpu_speedup_vs_greedy=sum(g.cpu_seconds for g in greedy) / sum(r.cpu_seconds for r in runs),
        tokens_per_pass=tokens / passes if passes else None,
        identical_share=sum(r.identical for r in runs) / len(runs),
        worst_speedup=min(per_question),
        median_speedup=statistics.median(per_question),
        mean_copied_share=statistics.mean(r.copied_tokens / r.tokens if r.tokens else 0.0 for r in runs),
        mismatches=[q.question for q, r in zip(measured, runs, strict=True) if not r.identical],
    )


def warn_about_mismatches(rows: list[Row]) -> None:
    """LLMA must reproduce greedy decoding exactly; anything else is a bug worth shouting about."""
    bad = [r for r in rows if r.method in LLMA_METHODS and r.mismatches]
    for row in bad:
        print(
            f"\n{'!' * 78}\n!! NOT LOSSLESS: {row.method} differs from greedy on {len(row.mismatches)} "
            f"{row.workload} question(s):\n" + "\n".join(f"!!   {q}" for q in row.mismatches) + f"\n{'!' * 78}",
            file=sys.stderr,
        )


def machine_info() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average_at_start": list(os.getloadavg()),
    }


# --- the command --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chatbot.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", type=Path, default=DATA_DIR / "questions.jsonl", help="questions JSONL")
    parser.add_argument("--articles", type=Path, default=DATA_DIR / "articles.json", help="article id -> text")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for results.json, report, plots")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="at most this many questions per workload and grid")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    parser.add_argument("--grid-questions", type=int, default=12, help="cache-assisted questions in the n-by-k grid")
    parser.add_argument("--k", type=int, default=4, help="cache hits used as references")
    parser.add_argument("--threshold", type=float, default=0.5, help="least cosine similarity of a cache hit")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=1, help="rounds per question; each method keeps its fastest")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if "greedy" not in args.methods:
        args.methods.insert(0, "greedy")  # the baseline every speedup and identity check is measured against
    return args


class Stopwatch:
    """Seconds spent in each phase of the run, for the report."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 1)
        self._last = now


def prepare_items(
    decoder: Decoder, tokenizer, model_id: str, selection: Selection, articles: dict[str, str], k: int, threshold: float
) -> tuple[dict[str, list[Item]], int]:
    """Fill a throwaway answer cache with greedy answers to first wordings; build every workload's prompts on it."""
    embedder = Embedder.load()
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
        cache = AnswerCache.open(cache_dir, embed=embedder.embed, dim=embedder.dim, embedder_name=embedder.name)
        bench = Workbench(tokenizer, decoder, cache, model_id)
        for group in tqdm(selection.groups_to_store(), desc="filling the cache", unit="answer"):
            bench.store_first_wording(selection.groups[group][0])
        items = build_items(bench, selection, articles, k, threshold)
        cache.close()
    return items, len(bench.group_of_entry)


def run_bench(
    workload_path: Path, articles_path: Path, max_new_tokens: int, limit: int | None, methods: list[str],
    grid_questions: int, k: int, threshold: float, repeats: int,
) -> dict:
    """Load everything, fill the cache, run each workload and the grid; returns what results.json holds."""
    clock = Stopwatch()
    machine = machine_info()
    model, tok = load_model()
    model_id = Path(model.config.name_or_path).name
    torch.manual_seed(0)
    # The forward cost curve is measured once, before any timing.
    llma_policy = AdaptiveCopyPolicy(cost=measure_cost_curve(model))
    decoder = Decoder(model, tok.eos_token_id, max_new_tokens, llma_policy)
    clock.lap("load model, measure cost curve")
    articles = load_articles(articles_path)
    selection = select_questions(load_questions(workload_path), articles, limit)
    items, cache_entries = prepare_items(decoder, tok, model_id, selection, articles, k, threshold)
    first = next((i for w in WORKLOADS for i in items[w]), None)
    if first is not None:
        warm_up(decoder, first, methods)
    clock.lap("fill cache, warm up")
    records = {}
    for workload in WORKLOADS:
        records[workload] = run_workload(decoder, items[workload], methods, repeats, lambda ids: text_of(tok, ids))
        clock.lap(workload)
    grid_items = items["cache_assisted"][: min(grid_questions, limit or grid_questions)]
    grid = run_grid(decoder, grid_items, repeats)
    clock.lap("grid")
    rows = [summarize(w, m, records[w]) for w in WORKLOADS for m in METHODS if m in methods]
    warn_about_mismatches(rows)
    machine["load_average_at_end"] = list(os.getloadavg())
    return {
        "model": {"id": model_id, "dtype": str(next(model.parameters()).dtype),
                  "parameters": sum(p.numel() for p in model.parameters())},
        "machine": machine,
        "settings": {
            "workload": str(workload_path), "articles": str(articles_path), "max_new_tokens": max_new_tokens,
            "limit": limit, "repeats": repeats, "methods": methods, "grid_questions": len(grid_items), "k": k,
            "threshold": threshold, "cache_entries": cache_entries, "paper_policy": asdict(PAPER_POLICY),
            "llma_policy": {key: v for key, v in asdict(llma_policy).items() if key != "cost"},
        },
        "workloads": list(WORKLOADS),
        "cost_curve": llma_policy.cost.to_json(),
        "rows": [asdict(r) for r in rows],
        "grid": [asdict(c) for c in grid],
        "questions": [asdict(r) for w in WORKLOADS for r in records[w]],
        "phase_seconds": clock.laps,
        "wall_seconds": round(sum(clock.laps.values()), 1),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    results = run_bench(
        args.workload, args.articles, args.max_new_tokens, args.limit, args.methods, args.grid_questions,
        args.k, args.threshold, args.repeats,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    written = write_report(results, args.out)
    print(f"wrote {args.out / 'results.json'} and {', '.join(str(p) for p in written)} "
          f"in {results['wall_seconds']:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
