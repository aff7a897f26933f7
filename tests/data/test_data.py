import json
import re
from pathlib import Path

import pytest

from data import Question, article_title, group_questions, load_articles, load_questions

# Every price an article may quote; a new one here means the plans changed and every article must agree.
KNOWN_PRICES = {"$0", "$4", "$5", "$8", "$8.40", "$12", "$40", "$80", "$84", "$120"}


@pytest.fixture(scope="module")
def articles() -> dict[str, str]:
    return load_articles()


@pytest.fixture(scope="module")
def groups() -> dict[str, list[Question]]:
    return group_questions(load_questions())


def paraphrase_groups(groups: dict[str, list[Question]]) -> dict[str, list[Question]]:
    return {name: lines for name, lines in groups.items() if len(lines) > 1}


def novel_groups(groups: dict[str, list[Question]]) -> dict[str, list[Question]]:
    return {name: lines for name, lines in groups.items() if len(lines) == 1}


def test_shipped_counts(articles, groups):
    assert len(articles) >= 25
    assert len(paraphrase_groups(groups)) >= 40
    assert len(novel_groups(groups)) >= 20


def test_articles_have_title_blank_line_and_body(articles):
    for article_id, text in articles.items():
        title, blank, body = text.partition("\n\n")
        assert blank and "\n" not in title, article_id
        assert title == article_title(text)
        assert 120 <= len(body.split()) <= 250, article_id
        assert "](" not in text and "<a " not in text and "http" not in text, article_id  # plain text only


def test_articles_quote_only_known_prices(articles):
    for article_id, text in articles.items():
        assert set(re.findall(r"\$\d+(?:\.\d+)?", text)) <= KNOWN_PRICES, article_id


def test_group_sizes(groups):
    for name, lines in groups.items():
        assert len(lines) == 1 or 4 <= len(lines) <= 5, name


def test_every_article_id_exists(articles, groups):
    for lines in groups.values():
        for question in lines:
            assert question.article is None or question.article in articles, question


def test_lines_of_a_group_share_one_article(groups):
    for name, lines in groups.items():
        assert len({question.article for question in lines}) == 1, name


def test_few_paraphrase_groups_lack_an_article(groups):
    uncovered = [name for name, lines in paraphrase_groups(groups).items() if lines[0].article is None]
    assert 1 <= len(uncovered) <= 6


def test_novel_questions_are_single_lines_without_article(groups):
    for name, lines in novel_groups(groups).items():
        assert name.startswith("novel-"), name
        assert lines[0].article is None and not lines[0].follow_up, name


def test_follow_ups_are_never_first(groups):
    follow_up_groups = 0
    for name, lines in groups.items():
        assert not lines[0].follow_up, name
        follow_up_groups += any(question.follow_up for question in lines)
    assert 8 <= follow_up_groups <= 14


def test_lines_of_a_group_are_contiguous():
    names = [question.group for question in load_questions()]
    runs = [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]
    assert len(runs) == len(set(runs))


def test_no_duplicate_question_text():
    texts = [" ".join(question.question.lower().split()) for question in load_questions()]
    assert len(texts) == len(set(texts))


def test_group_questions_keeps_file_order():
    questions = [Question("b", "one", None), Question("a", "two", "x"), Question("b", "three", None)]
    groups = group_questions(questions)
    assert list(groups) == ["b", "a"]
    assert [question.question for question in groups["b"]] == ["one", "three"]


def test_load_questions_reads_follow_up(tmp_path: Path):
    path = tmp_path / "q.jsonl"
    rows = [
        {"group": "g", "question": "hi", "article": "a"},
        {"group": "g", "question": "shorter", "article": "a", "follow_up": True},
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n", encoding="utf-8")
    assert load_questions(path) == [Question("g", "hi", "a"), Question("g", "shorter", "a", follow_up=True)]


@pytest.mark.parametrize(
    "bad_line",
    [
        '{"group": "g", "question": "broken"',
        '["not", "an", "object"]',
        '{"group": "g", "article": null}',
        '{"group": "g", "question": "q", "article": 7}',
        '{"group": "g", "question": "q", "article": null, "follow_up": "yes"}',
    ],
)
def test_load_questions_names_file_and_line(tmp_path: Path, bad_line: str):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"group": "g", "question": "fine", "article": None})
    path.write_text(f"{good}\n{good}\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 3"):
        load_questions(path)


@pytest.mark.parametrize("content", ['["a list"]', '{"reset": 5}', '{"reset": "ok",'])
def test_load_articles_rejects_bad_files(tmp_path: Path, content: str):
    path = tmp_path / "articles.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="articles.json"):
        load_articles(path)


def test_article_title_is_first_line():
    assert article_title("Reset a password\n\nBody text.") == "Reset a password"
