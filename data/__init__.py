"""The shipped help-center articles and benchmark questions for Nimbus Drive, loaded as plain Python data."""

import json
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Question:
    """One wording of a user's need; `article` is the id that answers it, or None when no article does."""

    group: str
    question: str
    article: str | None
    follow_up: bool = False


def _question_from_row(row: object) -> Question:
    """Build a Question from one decoded JSON line, raising ValueError on a wrong shape."""
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    group, question, article = row.get("group"), row.get("question"), row.get("article")
    follow_up = row.get("follow_up", False)
    if not isinstance(group, str) or not group:
        raise ValueError("'group' must be a non-empty string")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    if article is not None and not isinstance(article, str):
        raise ValueError("'article' must be a string or null")
    if not isinstance(follow_up, bool):
        raise ValueError("'follow_up' must be true or false")
    return Question(group=group, question=question, article=article, follow_up=follow_up)


def load_questions(path: str | Path = DATA_DIR / "questions.jsonl") -> list[Question]:
    """Read one Question per non-blank line of a JSONL file, in file order."""
    questions = []
    with open(path, encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                questions.append(_question_from_row(json.loads(line)))
            except ValueError as err:  # json.JSONDecodeError is a ValueError too
                raise ValueError(f"{path}, line {line_no}: {err}") from err
    return questions


def load_articles(path: str | Path = DATA_DIR / "articles.json") -> dict[str, str]:
    """Read the article id -> text mapping from a JSON object of strings."""
    with open(path, encoding="utf-8") as file:
        try:
            articles = json.load(file)
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from err
    if not isinstance(articles, dict):
        raise ValueError(f"{path}: expected a JSON object mapping article id to text")
    for article_id, text in articles.items():
        if not isinstance(text, str):
            raise ValueError(f"{path}: article {article_id!r} must be a string")
    return articles


def group_questions(questions: list[Question]) -> dict[str, list[Question]]:
    """Collect questions by group, keeping groups and their lines in file order."""
    groups: dict[str, list[Question]] = {}
    for question in questions:
        groups.setdefault(question.group, []).append(question)
    return groups


def article_title(text: str) -> str:
    """Return an article's title, its first line."""
    return text.split("\n", 1)[0].strip()


def example_questions(count: int = 6) -> list[str]:
    """The first wording of each of the first `count` question groups shipped in data/questions.jsonl."""
    groups = group_questions(load_questions())
    return [wordings[0].question for wordings in list(groups.values())[:count]]


@dataclass(frozen=True)
class StaffAnswer:
    """A staff-written, reviewed answer to a question group's first wording, shipped as approved."""

    group: str
    question: str
    answer: str
    article: str


def load_staff_answers(path: str | Path = DATA_DIR / "approved_answers.jsonl") -> list[StaffAnswer]:
    """The shipped approved answers; ValueError names the first bad line."""
    answers = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            answers.append(StaffAnswer(**{key: str(row[key]) for key in ("group", "question", "answer", "article")}))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: {err}") from err
    return answers


# The kinds of the team's answer evaluation (bench/answers.py); the last two are answered by a hand-off or a decline.
EVAL_KINDS = ("covered", "article_only", "opposite", "sum", "followup", "uncovered", "injection")


@dataclass(frozen=True)
class EvalQuestion:
    """A customer's conversation, graded on its last message: the facts a correct reply holds (each one of
    several spellings) and those that make it wrong. No `must` means nothing answers it: it is to be handed off."""

    id: str
    kind: str
    split: str  # "tune" (thresholds were chosen on it) or "holdout" (never looked at while tuning)
    turns: tuple[str, ...]
    must: tuple[tuple[str, ...], ...]
    wrong: tuple[str, ...]
    article: str | None

    @property
    def answerable(self) -> bool:
        return bool(self.must)


def load_eval_questions(path: str | Path = DATA_DIR / "eval_answers.jsonl") -> list[EvalQuestion]:
    """The team's labelled questions, in file order."""
    questions = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row["kind"] not in EVAL_KINDS or row["split"] not in ("tune", "holdout") or not row["turns"]:
            raise ValueError(f"{row.get('id')}: bad kind, split or turns")
        must = tuple((fact,) if isinstance(fact, str) else tuple(fact) for fact in row["must"])
        questions.append(EvalQuestion(row["id"], row["kind"], row["split"], tuple(row["turns"]), must,
                                      tuple(row["wrong"]), row.get("article")))
    return questions
