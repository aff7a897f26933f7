"""Knowledge-base articles: stored, found by meaning, replaced and deleted."""

import pytest

PASSWORD_BODY = "Open the sign-in page, choose 'Forgot password' and follow the emailed link."
BILLING_BODY = "Invoices are listed under Billing; each can be downloaded as a PDF."


def test_best_article_finds_the_closest_article(cache):
    cache.upsert_article("password-reset", "Resetting your password", PASSWORD_BODY)
    cache.upsert_article("invoices", "Downloading invoices", BILLING_BODY)
    hit = cache.best_article("I forgot my password")
    assert hit.id == "password-reset" and hit.body == PASSWORD_BODY and 0.3 <= hit.score <= 1.0
    assert cache.best_article("Where can I get a PDF of my bill?").id == "invoices"
    assert cache.best_article("Which cheese goes with red wine?", threshold=0.5) is None


def test_upsert_replaces_and_reembeds(cache):
    created = cache.upsert_article("faq", "Resetting your password", PASSWORD_BODY)
    updated = cache.upsert_article("faq", "Downloading invoices", BILLING_BODY)
    assert updated.created_at == created.created_at and updated.updated_at >= created.updated_at
    assert [a.title for a in cache.list_articles()] == ["Downloading invoices"]
    assert cache.best_article("Where can I get a PDF of my bill?").id == "faq"
    assert cache.best_article("I forgot my password", threshold=0.5) is None


def test_delete_article(cache):
    cache.upsert_article("faq", "Resetting your password", PASSWORD_BODY)
    assert cache.delete_article("faq") is True
    assert cache.delete_article("faq") is False
    assert cache.get_article("faq") is None and cache.list_articles() == []
    assert cache.best_article("I forgot my password", threshold=-1) is None


def test_articles_need_an_id(cache):
    with pytest.raises(ValueError, match="id"):
        cache.upsert_article(" ", "Title", "Body")
