"""Retrieval alone, no decoding: which approved answer would ground each shipped rewording, tuned and held out.

    python -m bench.retrieval [--aliases 2] [--out docs/retrieval] [--embedding-model all-MiniLM-L6-v2]
                              [--embedding-dtype float32]

A fresh install's cache (the shipped articles and approved staff answers) is asked every rewording the way
the chat turn asks it (the hybrid match, the article pick, the consistency check of chatbot/grounding.py).
The question groups are split in two halves by a hash of their names: the lexical weight, threshold and
margins are chosen on the tuning half only (most coverage with <= 5% novel questions grounded and precision
>= 95% by the lower bound of its one-sided 80% Wilson interval, not by the point estimate: a tuning half grounds
some 70 rewordings, where one lucky question moves precision by 1.4 points), then measured on the held-out half.
`--aliases N` confirms each approved group's first N rewordings as wordings of its approved entry, as staff
confirm suggestions; those wordings are never asked.
Groups without an approved answer (novel questions, topics no answer covers) are asked in every wording:
any grounding of them is wrong. Runs in about two minutes with all-mpnet-base-v2, one with MiniLM (embedding only).
"""

import argparse
import hashlib
import math
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import AutoTokenizer

from bench.markdown import fmt, table, write_side_run
from cache import AnswerCache, Embedder
from cache.embedder import DEFAULT_MODEL as DEFAULT_EMBEDDING_MODEL
from cache.embedder import DTYPES as EMBEDDING_DTYPES
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from cache.records import Hit
from chatbot.grounding import GroundingPolicy, article_of_match, choose_grounding
from chatbot.seed import Seed, seed_help_centre
from chatbot.settings import ChatSettings, embedding_dtype_for
from data import Question, group_questions, load_questions
from decoding.model_loading import DEFAULT_MODEL_DIR

MODEL_ID = "bench-retrieval"
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5)
FUSIONS = tuple((answers, weight) for answers in (False, True) for weight in WEIGHTS)  # (match answers?, BM25 weight)
THRESHOLDS = tuple(round(0.30 + 0.025 * i, 3) for i in range(37))  # 0.30 .. 1.20
MARGINS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2)
ARTICLE_AGREES_MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05)  # GroundingPolicy.article_margin, at most the margin
TARGET_PRECISION, TARGET_NOVEL = 0.95, 0.05
CONFIDENCE_Z = 0.84  # one-sided 80%: the tuned precision's lower bound must reach TARGET_PRECISION
ARTICLE_THRESHOLDS = tuple(round(0.35 + 0.05 * i, 2) for i in range(8))  # 0.35 .. 0.70
ARTICLE_MARGINS = (0.0, 0.05, 0.1)
TARGET_ARTICLE_WRONG = 0.10  # the article rule is chosen for most right picks with at most this share wrong
BEFORE_THRESHOLD = 0.6  # the rule before aliases and the check: the best cosine grounds from 0.6 on


@dataclass(frozen=True)
class Probe:
    """One asked wording and what retrieval saw for it, at one lexical weight."""

    group: str
    question: str
    covered: bool  # the group has an approved answer
    half: str  # "tune" or "held-out"
    article_id: str | None
    article_text: str | None
    matches: list[Hit]
    article_score: float = 0.0
    gold_article: str | None = None  # the article the shipped data names for the group (None: none covers it)


@dataclass(frozen=True)
class Score:
    coverage: float  # covered rewordings that got an approved answer (into the prompt or as an article's own)
    precision: float  # of those, the right group's
    novel_grounded: float  # uncovered wordings that got one
    covered: int
    uncovered: int
    grounded: int = 0  # covered rewordings that got one
    right: int = 0  # of those, the right group's

    def precision_floor(self, z: float = CONFIDENCE_Z) -> float:
        """The lower bound of the Wilson score interval for the precision (0 with nothing grounded)."""
        n = self.grounded
        if n == 0:
            return 0.0
        p = self.right / n
        centre = p + z * z / (2 * n)
        spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return (centre - spread) / (1 + z * z / n)


@dataclass(frozen=True)
class ArticleScore:
    """The help article each wording got: the shipped one, another (wrong), none; and for wordings no article
    covers, how many got one anyway."""

    right: float
    wrong: float
    novel_picked: float
    labeled: int
    unlabeled: int


@dataclass(frozen=True)
class Tuned:
    answers: bool  # approved answers' own vectors matched too
    weight: float
    threshold: float
    margin: float
    article_margin: float
    sibling_grounds: bool
    tune: Score
    held_out: Score

    @property
    def policy(self) -> GroundingPolicy:
        return GroundingPolicy(self.threshold, self.margin, self.article_margin, sibling_grounds=self.sibling_grounds)

    def describe(self) -> str:
        siblings = "the best of two from one article grounds" if self.sibling_grounds else (
            "two from one article need the margin")
        return (f"{_fusion(self.answers, self.weight)}, threshold {self.threshold}, margin {self.margin} "
                f"({self.article_margin} where the article agrees; {siblings})")


def half_of(group: str) -> str:
    """A fixed half for each group, from its name: 'tune' or 'held-out'."""
    return "tune" if int(hashlib.sha256(group.encode()).hexdigest(), 16) % 2 == 0 else "held-out"


def open_seeded(data_dir: Path, embedder: Embedder) -> tuple[AnswerCache, dict[int, str]]:
    """A fresh install's cache and the group each approved entry answers."""
    cache = AnswerCache.open(data_dir, embed=embedder.embed, dim=embedder.dim, embedder_name=embedder.name)
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    seed = Seed.shipped()
    seed_help_centre(cache, tokenizer, MODEL_ID, seed)
    by_question = {answer.question: answer.group for answer in seed.answers}
    approved = cache.list_entries(review="approved", limit=10_000).entries
    return cache, {entry.id: by_question[entry.question] for entry in approved}


def asked_and_aliases(aliases: int, covered: set[str]) -> tuple[list[Question], dict[str, list[str]]]:
    """The wordings asked, and per covered group the rewordings confirmed as wordings (never asked)."""
    asked, confirmed = [], {}
    for group, wordings in group_questions(load_questions()).items():
        plain = [q for q in wordings if not q.follow_up]
        if group in covered:
            confirmed[group] = [q.question for q in plain[1 : 1 + aliases]]
            asked += plain[1 + aliases :]
        else:
            asked += plain
    return asked, confirmed


def probe_all(cache: AnswerCache, asked: list[Question], covered: set[str], article_threshold: float) -> dict:
    """Per fusion (answers matched or not, lexical weight), a Probe for each asked wording."""
    probes: dict[tuple[bool, float], list[Probe]] = {fusion: [] for fusion in FUSIONS}
    for q in asked:
        article = cache.best_article(q.question, threshold=article_threshold)
        text = f"{article.title}\n\n{article.body}" if article else None
        for answers, weight in FUSIONS:
            matches = cache.match(q.question, k=2, model_id=MODEL_ID, lexical_weight=weight, match_answers=answers)
            probes[answers, weight].append(Probe(q.group, q.question, q.group in covered, half_of(q.group),
                                        article.id if article else None, text, matches,
                                        article.score if article else 0.0, q.article))
    return probes


def score(probes: list[Probe], groups: dict[int, str], policy: GroundingPolicy | None, half: str) -> Score:
    """Coverage, precision and novel questions grounded on one half; `policy` None: the rule before."""
    got = right = wrong_novel = covered = uncovered = 0
    for probe in (p for p in probes if p.half == half):
        matched = decide(probe, policy)
        if probe.covered:
            covered += 1
            got += matched is not None
            right += matched is not None and groups[matched.id] == probe.group
        else:
            uncovered += 1
            wrong_novel += matched is not None
    return Score(got / max(covered, 1), right / max(got, 1), wrong_novel / max(uncovered, 1), covered, uncovered,
                 got, right)


def decide(probe: Probe, policy: GroundingPolicy | None) -> Hit | None:
    """The approved answer this question gets: by the chat turn's check, or (None) by the rule before."""
    if policy is None:
        best = probe.matches[0] if probe.matches else None
        return best if best is not None and best.dense >= BEFORE_THRESHOLD else None
    matched = choose_grounding(probe.matches, probe.article_id, probe.article_text, policy).matched
    return matched[0] if matched else None


def tune(probes: dict, groups: dict[int, str]) -> Tuned:
    """The fusion, threshold and margins with the most tuning-half coverage that meet the targets there."""
    best = None
    for (answers, weight), probed in probes.items():
        for threshold, margin, article_margin, siblings in policies():
            policy = GroundingPolicy(threshold, margin, article_margin, sibling_grounds=siblings)
            tuned = score(probed, groups, policy, "tune")
            if tuned.precision_floor() < TARGET_PRECISION or tuned.novel_grounded > TARGET_NOVEL:
                continue
            key = (tuned.coverage, tuned.precision, -tuned.novel_grounded, threshold, margin, article_margin,
                   siblings)
            if best is None or key > best[0]:
                held_out = score(probed, groups, policy, "held-out")
                best = (key, Tuned(answers, weight, threshold, margin, article_margin, siblings, tuned, held_out))
    if best is None:
        raise RuntimeError("no setting met the targets on the tuning half")
    return best[1]


def policies() -> list[tuple[float, float, float, bool]]:
    """Every (threshold, margin, article margin, sibling grounds) the tuning tries."""
    return [(t, m, a, s) for t in THRESHOLDS for m in MARGINS for a in ARTICLE_AGREES_MARGINS if a <= m
            for s in (False, True)]


def curve(probes: list[Probe], groups: dict[int, str], tuned: Tuned, half: str) -> list[tuple[float, Score]]:
    """Coverage (recall), precision and novel questions grounded over the threshold, at the tuned weight, margins
    and sibling rule."""
    return [(threshold, score(probes, groups, replace(tuned.policy, threshold=threshold), half))
            for threshold in THRESHOLDS]


def report(runs: dict[int, Tuned], baselines: dict[int, dict[str, Score]], curves: dict[int, list],
           articles: dict[int, str]) -> str:
    header = ["confirmed wordings per group", "rule", "half", "coverage", "precision", "novel grounded",
              "questions (covered / uncovered)"]
    rows = []
    for aliases, tuned in runs.items():
        rule = tuned.describe()
        for half, measured in (("tune", tuned.tune), ("held-out", tuned.held_out)):
            rows.append([str(aliases), rule, half, *_cells(measured)])
        for rule, measured in baselines[aliases].items():
            rows.append([str(aliases), rule, "held-out", *_cells(measured)])
    body = [table(header, rows)]
    for aliases, text in articles.items():
        body.append(f"### The help article each wording gets ({aliases} confirmed wordings per group, the app's "
                    "match; rule tuned on the tuning half)")
        body.append(text)
    for aliases, points in curves.items():
        tuned = runs[aliases]
        body.append(f"### Held-out curve over the threshold ({aliases} confirmed wordings per group, "
                    f"{tuned.describe()})")
        body.append(table(["threshold", "coverage", "precision", "novel grounded"],
                          [[str(t), *_cells(s)[:3]] for t, s in points if 0.4 <= t <= 1.0]))
    return "\n\n".join(body)


def article_score(probes: list[Probe], rule: tuple[float, float] | None, half: str) -> ArticleScore:
    """How the article pick fares on one half: by the article's vector alone (`rule` None), or with the chat
    turn's rule (TurnPlanner.pick_article) at (threshold, margin)."""
    asked = [p for p in probes if p.half == half]
    picks = [(p, article_of_match(p.matches, *rule) if rule else None) for p in asked]
    picks = [(p, pick or p.article_id) for p, pick in picks]
    labeled = [(p, pick) for p, pick in picks if p.gold_article]
    unlabeled = [pick for p, pick in picks if not p.gold_article]
    right = sum(pick == p.gold_article for p, pick in labeled)
    wrong = sum(pick not in (None, p.gold_article) for p, pick in labeled)
    n = max(len(labeled), 1)
    return ArticleScore(right / n, wrong / n, sum(pick is not None for pick in unlabeled) / max(len(unlabeled), 1),
                        len(labeled), len(unlabeled))


def tune_article_rule(probes: list[Probe]) -> tuple[float, float]:
    """(threshold, margin) with the most right picks on the tuning half, at most TARGET_ARTICLE_WRONG wrong."""
    rules = [(t, m) for t in ARTICLE_THRESHOLDS for m in ARTICLE_MARGINS]
    scored = [(article_score(probes, rule, "tune"), rule) for rule in rules]
    fit = [(s, rule) for s, rule in scored if s.wrong <= TARGET_ARTICLE_WRONG] or scored
    return max(fit, key=lambda x: (x[0].right, -x[0].wrong, x[1]))[1]


def article_report(probes: list[Probe], app: ChatSettings) -> str:
    tuned = tune_article_rule(probes)
    rules = {"the article's own vector (before)": None,
             f"tuned: the approved match's article from {tuned[0]}, margin {tuned[1]}": tuned,
             f"the app's defaults: from {app.article_match_threshold}, margin {app.article_match_margin}":
                 (app.article_match_threshold, app.article_match_margin)}
    rows = []
    for name, rule in rules.items():
        for half in ("tune", "held-out"):
            s = article_score(probes, rule, half)
            rows.append([name, half, fmt(100 * s.right, ".0f", "%"), fmt(100 * s.wrong, ".0f", "%"),
                         fmt(100 * (1 - s.right - s.wrong), ".0f", "%"), fmt(100 * s.novel_picked, ".0f", "%"),
                         f"{s.labeled} / {s.unlabeled}"])
    return table(["article pick", "half", "right", "wrong", "none", "uncovered wordings given one",
                  "wordings (with an article / without)"], rows)


def handoff_report(probes: list[Probe], groups: dict[int, str], app: ChatSettings) -> str:
    """How many first questions the app hands off (ChatSettings.uncovered): neither an approved answer nor a help
    article (by the app's pick) for them. Uncovered wordings should be; covered ones should not."""
    policy = GroundingPolicy(app.grounding_threshold, app.grounding_margin, app.grounding_article_margin)
    rows = []
    for half in ("tune", "held-out"):
        asked = [p for p in probes if p.half == half]
        handed = [p for p in asked if decide(p, policy) is None and
                  (article_of_match(p.matches, app.article_match_threshold, app.article_match_margin)
                   or p.article_id) is None]
        covered = sum(p.covered for p in asked)
        got_covered = sum(p.covered for p in handed)
        rows.append([half, f"{len(handed) - got_covered} / {len(asked) - covered}", f"{got_covered} / {covered}"])
    return table(["half", "uncovered wordings handed off", "covered rewordings handed off"], rows)


def _fusion(answers: bool, weight: float) -> str:
    return f"{'question and answer' if answers else 'question'} cosine + {weight} x BM25"


def _cells(measured: Score) -> list[str]:
    return [fmt(100 * measured.coverage, ".0f", "%"), fmt(100 * measured.precision, ".0f", "%"),
            fmt(100 * measured.novel_grounded, ".0f", "%"), f"{measured.covered} / {measured.uncovered}"]


def measure(aliases: int, embedder: Embedder, app: ChatSettings) -> tuple[Tuned, dict[str, Score], list, str]:
    with tempfile.TemporaryDirectory() as folder:
        cache, groups = open_seeded(Path(folder), embedder)
        entry_of = {group: entry_id for entry_id, group in groups.items()}
        asked, confirmed = asked_and_aliases(aliases, set(entry_of))
        for group, wordings in confirmed.items():
            for wording in wordings:
                cache.add_wording(entry_of[group], wording, created_by="bench")
        probes = probe_all(cache, asked, set(entry_of), app.article_threshold)
        cache.close()
    tuned = tune(probes, groups)
    shipped = GroundingPolicy(app.grounding_threshold, app.grounding_margin, app.grounding_article_margin)
    defaults = (f"the app's defaults: {_fusion(app.match_answers, app.lexical_weight)}, threshold "
                f"{app.grounding_threshold}, margin {app.grounding_margin} / {app.grounding_article_margin}")
    app_probes = probes[app.match_answers, app.lexical_weight]
    others = {
        f"before: cosine >= {BEFORE_THRESHOLD}, no check": score(probes[False, 0.0], groups, None, "held-out"),
        defaults: score(app_probes, groups, shipped, "held-out"),
        f"{defaults}, two from one article need the margin (the rule until 9bb8cf9)":
            score(app_probes, groups, replace(shipped, sibling_grounds=False), "held-out"),
    }
    articles = article_report(app_probes, app) + (
        "\n\nHanded off by the app (no approved answer and no article; the app's rule and defaults):\n\n"
        + handoff_report(app_probes, groups, app))
    points = curve(probes[tuned.answers, tuned.weight], groups, tuned, "held-out")
    return tuned, others, points, articles


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n")[0])
    parser.add_argument("--aliases", default="0,2", help="confirmed wordings per group, comma-separated runs")
    parser.add_argument("--out", type=Path, default=Path("docs/retrieval"))
    parser.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL,
                        help=f"a prepared model's name, {EMBEDDING_BUNDLED} (bundled) or a folder")
    parser.add_argument("--embedding-dtype", default="auto", choices=("auto", *EMBEDDING_DTYPES),
                        help="as CHATBOT_EMBEDDING_DTYPE (auto: bfloat16 where the CPU has it natively)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one short question: a second thread only waits on a shared machine
    embedder = Embedder.named(args.embedding_model, embedding_dtype_for(args.embedding_dtype))
    app = ChatSettings(embedding_model=args.embedding_model).for_embedder(embedder.name)
    runs, baselines, curves, articles = {}, {}, {}, {}
    for aliases in (int(a) for a in args.aliases.split(",")):
        runs[aliases], baselines[aliases], curves[aliases], articles[aliases] = measure(aliases, embedder, app)
    data = {str(a): {"tuned": asdict(t), **{k: asdict(v) for k, v in baselines[a].items()}} for a, t in runs.items()}
    text = write_side_run(args.out, "Retrieval: aliases, hybrid match and the consistency check", embedder.name,
                          report(runs, baselines, curves, articles), "report.md", "results.json", data)
    print(text)


if __name__ == "__main__":
    main()
