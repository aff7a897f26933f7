"""Re-embed every stored vector when the embedder changed (its name or dim), so old and new vectors never mix:
entries', articles' and wordings' (staff's confirmed ones match by them; suggested ones may be confirmed later)."""

from __future__ import annotations

from sqlalchemy import select

from cache import changes
from cache.backend import Backend
from cache.schema import Article, Entry, Setting, Wording
from cache.vectors import article_text, to_bytes


def check_embedder(backend: Backend, embedder_name: str) -> bool:
    """Re-embed everything if the stored vectors came from another embedder; True when it did.

    Called under `startup_lock`, so replicas starting together re-embed once.
    """
    wanted = {"embedding_dim": str(backend.embedding.dim)}
    if embedder_name:
        wanted["embedder_name"] = embedder_name
    with backend.sessions() as session:
        stored = {setting.key: setting.value for setting in session.scalars(select(Setting))}
    changed = any(key in stored and stored[key] != value for key, value in wanted.items())
    if changed:
        _reembed_all(backend)
    with backend.sessions.begin() as session:  # only after re-embedding, so a crash re-embeds again
        for key, value in wanted.items():
            session.merge(Setting(key=key, value=value))
    return changed


def _reembed_all(backend: Backend) -> None:
    """New vectors for every entry, wording and article in one transaction, logged so other replicas replay them
    (a replayed entry re-reads its wordings too)."""
    embed = backend.embedding.texts
    with backend.sessions.begin() as session:
        seq = changes.begin(session)
        entries = session.scalars(select(Entry)).all()
        for entry, vector in zip(entries, embed([e.question for e in entries]), strict=True):
            entry.embedding = to_bytes(vector)
        wordings = session.scalars(select(Wording)).all()
        for wording, vector in zip(wordings, embed([w.question for w in wordings]), strict=True):
            wording.embedding = to_bytes(vector)
        articles = session.scalars(select(Article)).all()
        for article, vector in zip(articles, embed([article_text(a.title, a.body) for a in articles]), strict=True):
            article.embedding = to_bytes(vector)
        changes.record(session, seq, [e.id for e in entries], [a.id for a in articles])
