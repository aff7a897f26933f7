"""The database is the source of truth: the FAISS file is rebuilt whenever it disagrees."""

import zlib

import numpy as np
import pytest
from cache_helpers import answer
from sqlalchemy import create_engine, text

from cache import VectorIndex
from cache.store import INDEX_FILE, SEEN_FILE

PASSWORD = "How do I reset my password?"
PARAPHRASE = "I forgot my password, how can I change it?"


def fake_embed(dim: int):
    """A stand-in embedder: a fixed random unit vector per text, unrelated to meaning."""

    def embed(texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(zlib.crc32(text.encode())).normal(size=dim) for text in texts]
        vectors = np.array(rows, dtype=np.float32).reshape(len(texts), dim)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return embed


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def filled(open_cache, data_dir) -> list[int]:
    """Three answers written by a cache that is then closed."""
    cache = open_cache(data_dir)
    questions = [PASSWORD, "Where can I download my invoices?", "How do I delete my account?"]
    ids = [cache.add_answer(answer(question)) for question in questions]
    cache.close()
    return ids


def saved_ids(data_dir) -> set[int]:
    return VectorIndex.load(data_dir / INDEX_FILE, 384).ids()


def test_reopening_keeps_answers_and_index(open_cache, data_dir, filled):
    cache = open_cache(data_dir)
    assert cache.lookup(PARAPHRASE, k=1)[0].id == filled[0]
    assert cache.get_entry(filled[1]).question == "Where can I download my invoices?"
    assert saved_ids(data_dir) == set(filled)


def test_a_deleted_index_file_is_rebuilt(open_cache, data_dir, filled):
    (data_dir / INDEX_FILE).unlink()
    cache = open_cache(data_dir)
    assert cache.lookup(PARAPHRASE, k=1)[0].id == filled[0]
    assert saved_ids(data_dir) == set(filled)


def test_a_corrupt_index_file_is_rebuilt(open_cache, data_dir, filled):
    (data_dir / INDEX_FILE).write_bytes(b"\x00garbage" * 100)
    cache = open_cache(data_dir)
    assert cache.lookup(PARAPHRASE, k=1)[0].id == filled[0]
    assert saved_ids(data_dir) == set(filled)


def test_an_index_with_an_extra_id_is_rebuilt_and_never_returns_it(open_cache, embedder, data_dir, filled):
    index = VectorIndex.load(data_dir / INDEX_FILE, 384)
    index.add([999], embedder.embed([PARAPHRASE]))  # a perfect match with no row behind it
    index.save(data_dir / INDEX_FILE)
    cache = open_cache(data_dir)
    assert 999 not in {hit.id for hit in cache.lookup(PARAPHRASE, k=4, threshold=-1)}
    assert saved_ids(data_dir) == set(filled)


def test_an_index_missing_an_id_is_rebuilt(open_cache, data_dir, filled):
    index = VectorIndex.load(data_dir / INDEX_FILE, 384)
    index.remove([filled[0]])
    index.save(data_dir / INDEX_FILE)
    cache = open_cache(data_dir)
    assert cache.lookup(PARAPHRASE, k=1)[0].id == filled[0]
    assert saved_ids(data_dir) == set(filled)


def test_a_crash_after_the_commit_loses_no_answer(open_cache, data_dir, monkeypatch):
    cache = open_cache(data_dir)
    with monkeypatch.context() as patch:
        patch.setattr(VectorIndex, "save", lambda self, path: (_ for _ in ()).throw(OSError("disk gone")))
        with pytest.raises(OSError, match="disk gone"):
            cache.add_answer(answer(PASSWORD))
    cache.close()
    reopened = open_cache(data_dir)
    hits = reopened.lookup(PARAPHRASE, k=1)
    assert [hit.question for hit in hits] == [PASSWORD]
    assert saved_ids(data_dir) == {hits[0].id}


def test_a_row_deleted_behind_the_index_is_never_returned(cache, data_dir, store_url):
    ghost = cache.add_answer(answer(PASSWORD))
    kept = cache.add_answer(answer(PASSWORD + " I am locked out"))
    engine = create_engine(store_url(data_dir))
    with engine.begin() as connection:  # as if we crashed before updating the index, and logged nothing
        connection.execute(text("DELETE FROM entries WHERE id = :id"), {"id": ghost})
    engine.dispose()
    assert [hit.id for hit in cache.lookup(PASSWORD, k=4, threshold=-1)] == [kept]


def test_a_changed_embedder_reembeds_everything(open_cache, embedder, data_dir):
    fake = open_cache(data_dir, embed=fake_embed(384), dim=384, embedder_name="fake")
    entry_id = fake.add_answer(answer(PASSWORD))
    fake.upsert_article("reset", "Resetting your password", "Use the forgot password link.")
    fake.close()
    real = open_cache(data_dir, embedder_name=embedder.name)
    assert [hit.id for hit in real.lookup(PARAPHRASE, k=1, threshold=0.5)] == [entry_id]
    assert real.best_article(PARAPHRASE).id == "reset"


def test_a_changed_dim_reembeds_everything(open_cache, data_dir):
    small = open_cache(data_dir, embed=fake_embed(8), dim=8)
    entry_id = small.add_answer(answer(PASSWORD))
    small.close()
    real = open_cache(data_dir)
    assert [hit.id for hit in real.lookup(PARAPHRASE, k=1, threshold=0.5)] == [entry_id]
    assert saved_ids(data_dir) == {entry_id}


@pytest.mark.parametrize("old_dim", [384, 8])
def test_a_changed_embedder_reembeds_staff_wordings_too(open_cache, embedder, data_dir, store_url, old_dim):
    """A confirmed wording keeps matching its entry after the embedding model changed, and a suggested one is
    re-embedded too (it may be confirmed later): their stored vectors are the new model's, of its size."""
    old = open_cache(data_dir, embed=fake_embed(old_dim), dim=old_dim, embedder_name="old")
    entry_id = old.add_answer(answer("Which cheese goes with red wine?", review="approved"))
    old.add_wording(entry_id, PASSWORD, created_by="staff")
    old.suggest_wording(entry_id, "I am locked out of my account")
    old.close()
    new = open_cache(data_dir, embedder_name=embedder.name)
    assert [hit.id for hit in new.match(PARAPHRASE, k=1)] == [entry_id]  # by the confirmed wording alone
    expected = {w.question: embedder.embed([w.question])[0] for w in new.wordings(entry_id)}
    engine = create_engine(store_url(data_dir))
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT question, embedding FROM wordings")).all()
    engine.dispose()
    assert len(rows) == 2
    for question, embedding in rows:
        assert np.allclose(np.frombuffer(embedding, dtype=np.float32), expected[question], atol=1e-5), question


def test_an_index_numbered_beyond_the_database_is_rebuilt(open_cache, embedder, data_dir, filled):
    """Same ids but stale vectors and a change number the database never gave: from another database."""
    index = VectorIndex.load(data_dir / INDEX_FILE, 384)
    index.add([filled[0]], embedder.embed(["Which cheese goes with red wine?"]))
    index.save(data_dir / INDEX_FILE)
    (data_dir / SEEN_FILE).write_text("1000000")
    cache = open_cache(data_dir)
    assert [hit.id for hit in cache.lookup(PARAPHRASE, k=1, threshold=0.5)] == [filled[0]]
