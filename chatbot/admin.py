"""What the admin pages do: browse and edit cached answers, the knowledge base, served replies, the dashboard,
and JSONL import/export. The web UI calls this, never the cache itself."""

from pathlib import Path

from cache import REVIEW_STATES, AnswerCache, ArticleRecord, CachedAnswer, DashboardStats, EntryPage, ReplyRecord

from .prompt import InputError, answer_token_ids
from .service import ChatService, Verification


class AdminService:
    def __init__(self, cache: AnswerCache, chat: ChatService) -> None:
        self.cache, self.chat = cache, chat  # chat: its tokenizer for edited answers, its model for verify

    # --- cached answers ----------------------------------------------------------------------------

    def list_entries(
        self,
        search: str = "",
        sort: str = "date",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        review: str | None = None,
    ) -> EntryPage:
        """One page of entries whose question or answer contains `search`; `sort` is one of cache.SORTS;
        `review` keeps one review state (None: all)."""
        return self.cache.list_entries(search, sort, descending, limit=limit, offset=offset, review=review)

    def set_review(self, entry_ids: list[int], review: str) -> int:
        """Approve or reject entries (or send them back to candidate); returns how many exist.

        Only approved answers guide replies from inside the prompt under the default grounding; a
        customer's thumbs-up approves nothing.
        """
        if review not in REVIEW_STATES:
            raise InputError(f"The review state must be one of {', '.join(REVIEW_STATES)}.")
        return self.cache.set_review(entry_ids, review)

    def get_entry(self, entry_id: int) -> CachedAnswer | None:
        return self.cache.get_entry(entry_id)

    def edit_entry(self, entry_id: int, question: str, answer: str) -> bool:
        """Save what changed (an edited answer with its token ids); False when nothing did.

        Raises KeyError for an unknown entry and InputError for an empty question or answer.
        """
        entry = self.cache.get_entry(entry_id)
        if entry is None:
            raise KeyError(f"no entry {entry_id}")
        if not question.strip() or not answer.strip():
            raise InputError("Question and answer must not be empty.")
        changes = {}
        if question != entry.question:
            changes["question"] = question
        if answer != entry.answer:
            changes.update(answer=answer, answer_ids=answer_token_ids(self.chat.tokenizer, answer))
        if not changes:
            return False
        # Staff wrote or checked these words: an edited answer is approved.
        self.cache.update_entry(entry.id, **changes, review="approved")
        return True

    def delete_entry(self, entry_id: int) -> bool:
        """Delete an entry; its replies stay, no longer linked to it. False when there was no such entry."""
        return self.cache.delete_entry(entry_id)

    # --- served replies ----------------------------------------------------------------------------

    def replies_for_entry(self, entry_id: int) -> list[ReplyRecord]:
        return self.cache.replies_for_entry(entry_id)

    def recent_replies(self, limit: int = 50) -> list[ReplyRecord]:
        return self.cache.recent_replies(limit=limit)

    def verify(self, reply_id: int) -> Verification:
        """Rerun a reply with plain greedy decoding (waits for the model); KeyError or ValueError if it cannot."""
        return self.chat.verify(reply_id)

    # --- knowledge base ----------------------------------------------------------------------------

    def list_articles(self) -> list[ArticleRecord]:
        return self.cache.list_articles()

    def get_article(self, article_id: str) -> ArticleRecord | None:
        return self.cache.get_article(article_id)

    def save_article(self, article_id: str, title: str, body: str) -> ArticleRecord:
        """Create or replace an article (re-embedded, so matching questions find it at once).

        Raises InputError when the id, title or body is empty.
        """
        article_id, title, body = article_id.strip(), title.strip(), body.strip()
        if not article_id or not title or not body:
            raise InputError("An article needs an id, a title and a body.")
        return self.cache.upsert_article(article_id, title, body)

    def delete_article(self, article_id: str) -> bool:
        return self.cache.delete_article(article_id.strip())

    # --- dashboard and transfer --------------------------------------------------------------------

    def dashboard_stats(self) -> DashboardStats:
        return self.cache.dashboard_stats()

    def reply_series(self) -> list[dict]:
        """One point per reply, oldest first: created_at, speedup, tokens_per_forward_pass, seconds_saved."""
        return self.cache.reply_series()

    def export_jsonl(self, path: str | Path) -> int:
        """Write every cached answer and article to `path` as JSON Lines; returns the number of lines."""
        return self.cache.export_jsonl(path)

    def import_jsonl(self, path: str | Path, approve: bool = False) -> int:
        """Add or update the records of an export in one transaction; ValueError (nothing imported) on a bad line.

        `approve` marks every imported answer approved; otherwise each keeps the review state in the file.
        """
        return self.cache.import_jsonl(path, approve=approve)
