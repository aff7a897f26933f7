"""JSON Lines export and import: a round trip keeps everything, a bad line imports nothing."""

import json
from dataclasses import asdict

import pytest
from cache_helpers import answer


@pytest.fixture
def exported(open_cache, tmp_path):
    source = open_cache(tmp_path / "source")
    entry_id = source.add_answer(
        answer(
            "How do I reset my password?", "Use the link.", article_ids=["reset"], stats={"speedup": 2.5}, speedup=2.5
        )
    )
    source.add_answer(answer("'; DROP TABLE entries; --", "Plain text.", context="[]", context_key="k"))
    source.find_exact("How do I reset my password?", "", "model-a", "")
    source.mark_used([entry_id])
    source.upsert_article("reset", "Resetting your password", "Choose 'Forgot password'.")
    path = tmp_path / "export.jsonl"
    assert source.export_jsonl(path) == 3
    return source, path


def comparable(cache) -> list[dict]:
    """Entries as they should survive a round trip: everything but the new id and update time."""
    entries = cache.list_entries(sort="date", descending=False).entries
    return [{k: v for k, v in asdict(e).items() if k not in ("id", "updated_at")} for e in entries]


def test_round_trip_keeps_entries_and_articles(open_cache, tmp_path, exported):
    source, path = exported
    target = open_cache(tmp_path / "target")
    assert target.import_jsonl(path) == 3
    assert comparable(target) == comparable(source)
    assert [(a.id, a.title, a.body) for a in target.list_articles()] == [
        (a.id, a.title, a.body) for a in source.list_articles()
    ]
    assert target.lookup("I forgot my password")[0].answer == "Use the link."
    assert target.best_article("I forgot my password").id == "reset"


def test_importing_twice_updates_instead_of_duplicating(open_cache, tmp_path, exported):
    _, path = exported
    target = open_cache(tmp_path / "target")
    target.import_jsonl(path)
    target.import_jsonl(path)
    assert target.list_entries().total == 2 and len(target.list_articles()) == 1


@pytest.mark.parametrize(
    "bad_line",
    [
        "{not json",
        json.dumps({"kind": "entry", "question": "q", "answer": "a", "model_id": "m"}),  # no answer_ids
        json.dumps({"kind": "entry", "question": "q", "answer": "a", "answer_ids": ["x"], "model_id": "m"}),
        json.dumps({"kind": "poem", "text": "roses"}),
        json.dumps(["a", "list"]),
    ],
)
def test_a_bad_line_names_its_number_and_imports_nothing(open_cache, tmp_path, exported, bad_line):
    _, path = exported
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], bad_line, *lines[1:]]) + "\n")
    target = open_cache(tmp_path / "target")
    target.add_answer(answer("An answer that was already here?"))
    with pytest.raises(ValueError, match="line 2"):
        target.import_jsonl(path)
    assert [e.question for e in target.list_entries().entries] == ["An answer that was already here?"]
    assert target.list_articles() == []


def test_the_speedup_travels_as_its_own_field(exported):
    _, path = exported
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("speedup") for line in lines if line["kind"] == "entry"] == [2.5, None]


def test_an_old_file_with_the_speedup_only_in_stats_still_imports_it(open_cache, tmp_path):
    line = {"kind": "entry", "question": "q?", "answer": "a", "answer_ids": [1], "model_id": "m"}
    line["stats"] = {"speedup": 3}  # no top-level "speedup": exported before it had a field of its own
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(line) + "\n")
    target = open_cache(tmp_path / "target")
    target.import_jsonl(path)
    assert target.list_entries().entries[0].speedup == 3.0
