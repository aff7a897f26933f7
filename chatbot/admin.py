"""What the staff pages do (cached answers, help articles, served replies, dashboard, import/export, proposals,
staff accounts, audit log); the web UI calls this, never the cache. Every method checks the acting user's role
in the database on each call, so a changed role takes effect at once; every change writes one audit row after it
succeeded, a refused call one `denied` row."""

import json
from pathlib import Path

from cache import (
    REVIEW_STATES,
    AnswerCache,
    ArticleRecord,
    AuditFilter,
    AuditRecord,
    CachedAnswer,
    DashboardStats,
    EntryPage,
    MergeResult,
    ProposalRecord,
    ReplyRecord,
    StaffRecord,
    Suggestion,
    WordingRecord,
)

from .accounts import ALL, REVIEW_ACTIONS, Accounts, PermissionDenied, StaffAccount, outranks
from .deployment import EngineSummary, step_width_key
from .prompt import InputError, answer_token_ids
from .replies import Verification
from .service import ChatService


class AdminService:
    def __init__(self, cache: AnswerCache, chat: ChatService, accounts: Accounts) -> None:
        self.cache, self.chat = cache, chat  # chat: its tokenizer for edited answers, its model for verify
        self.accounts = accounts
        self.staff_store = accounts.store

    # --- who may do what ---------------------------------------------------------------------------

    def require_role(self, actor: str, role: str, action: str, entry_id: int | None = None) -> StaffAccount:
        """The acting account if its role is at least `role`; otherwise a `denied` audit row and PermissionDenied."""
        account = self.accounts.get(actor)
        if account is not None and outranks(account.role, role):
            return account
        have = account.role if account else "no account"
        self.staff_store.record(actor or "(anonymous)", "denied", entry_id, details={"action": action, "role": have})
        raise PermissionDenied(f"Only an {role} may do this ({action}); {actor or 'nobody'} is {have}.")

    def account(self, actor: str) -> StaffAccount | None:
        return self.accounts.get(actor)

    def record_login(self, name: str, ok: bool, address: str, reason: str = "") -> None:
        """One audit row per login attempt (called by the login route, which knows the client's address)."""
        details = {"address": address, **({"reason": reason} if reason else {})}
        self.staff_store.record(name or "(empty)", "login" if ok else "login_failed", details=details)

    def authenticate(self, name: str, password: str) -> StaffAccount | None:
        return self.accounts.authenticate(name, password)

    # --- cached answers ----------------------------------------------------------------------------

    def list_entries(
        self,
        actor: str,
        search: str = "",
        sort: str = "date",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        review: str | None = None,
    ) -> EntryPage:
        """One page of entries whose question or answer contains `search`; `sort` is one of cache.SORTS;
        `review` keeps one review state (None: all)."""
        self.require_role(actor, "agent", "list_entries")
        return self.cache.list_entries(search, sort, descending, limit=limit, offset=offset, review=review)

    def set_review(self, actor: str, entry_ids: list[int], review: str) -> int:
        """Approve or reject entries (or send them back to candidate), an admin only; returns how many exist.

        One audit row per entry changed. Only approved answers guide replies from inside the prompt under the
        default grounding; a customer's thumbs-up approves nothing.
        """
        if review not in REVIEW_STATES:
            raise InputError(f"The review state must be one of {', '.join(REVIEW_STATES)}.")
        action = REVIEW_ACTIONS[review]
        self.require_role(actor, "admin", action, entry_ids[0] if len(entry_ids) == 1 else None)
        changed = self.cache.set_review(entry_ids, review)
        for entry_id in changed:
            self.staff_store.record(actor, action, entry_id, details={"review": review})
        return len(changed)

    def get_entry(self, actor: str, entry_id: int) -> CachedAnswer | None:
        self.require_role(actor, "agent", "open_entry", entry_id)
        return self.cache.get_entry(entry_id)

    def edit_entry(self, actor: str, entry_id: int, question: str, answer: str, proposal_id: int | None = None) -> bool:
        """Save what changed (an edited answer with its token ids); False when nothing did.

        Raises KeyError for an unknown entry and InputError for an empty question or answer.
        """
        self.require_role(actor, "admin", "edit", entry_id)
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
        # Staff wrote or checked these words: an edited answer is approved (and guides replies).
        self.cache.update_entry(entry.id, **changes, review="approved")
        details = {"before": _texts(entry.question, entry.answer), "after": _texts(question, answer)}
        if proposal_id is not None:
            details["proposal_id"] = proposal_id
        self.staff_store.record(actor, "edit", entry.id, details=details)
        return True

    def delete_entry(self, actor: str, entry_id: int) -> bool:
        """Delete an entry; its replies stay, no longer linked to it. False when there was no such entry."""
        self.require_role(actor, "admin", "delete", entry_id)
        entry = self.cache.get_entry(entry_id)
        if entry is None or not self.cache.delete_entry(entry_id):
            return False
        self.staff_store.record(actor, "delete", entry_id, details={"before": _texts(entry.question, entry.answer)})
        return True

    def entry_history(self, actor: str, entry_id: int) -> list[AuditRecord]:
        """Every audit row about this entry, newest first."""
        self.require_role(actor, "agent", "entry_history", entry_id)
        return self.staff_store.audit(AuditFilter(entry_id=entry_id))

    def adopt_reply(self, actor: str, reply_id: int) -> int:
        """Store a grounded reply's words, after staff reviewed them, as the answer of the approved entry that
        grounded it (an admin only; audited as an edit): the staff's facts in the model's own phrasing, which
        later replies copy more of (README: the service workload). Returns the entry id; KeyError for an
        unknown reply or a deleted entry, InputError for a reply no approved answer grounded."""
        self.require_role(actor, "admin", "edit")
        reply = self.cache.get_reply(reply_id)
        if reply is None:
            raise KeyError(f"no reply {reply_id}")
        grounding = reply.stats.get("grounding") or []
        if not grounding or not reply.token_ids:
            raise InputError(f"Reply {reply_id} was not grounded by an approved answer.")
        entry = self.cache.get_entry(int(grounding[0]["id"]))
        if entry is None:
            raise KeyError(f"no entry {grounding[0]['id']}")
        # The reply's own token ids, not a re-tokenization of its text: those are what the model produces.
        self.cache.update_entry(entry.id, answer=reply.answer, answer_ids=reply.token_ids, review="approved")
        details = {"before": _texts(entry.question, entry.answer), "after": _texts(entry.question, reply.answer),
                   "reply_id": reply_id}
        self.staff_store.record(actor, "edit", entry.id, details=details)
        return entry.id

    # --- wordings of an entry's question, suggestions and merging -------------------------------------

    def wordings(self, actor: str, entry_id: int) -> list[WordingRecord]:
        self.require_role(actor, "agent", "list_wordings", entry_id)
        return self.cache.wordings(entry_id)

    def add_wording(self, actor: str, entry_id: int, question: str) -> WordingRecord | None:
        """Attach a confirmed wording, an admin only: it matches at once. None when the entry has it already;
        KeyError for an unknown entry, InputError for an empty wording."""
        self.require_role(actor, "admin", "wording_add", entry_id)
        if not question.strip():
            raise InputError("A wording must not be empty.")
        added = self.cache.add_wording(entry_id, question, created_by=actor)
        if added is not None:
            self.staff_store.record(actor, "wording_add", entry_id, details=_wording(added))
        return added

    def remove_wording(self, actor: str, wording_id: int) -> bool:
        """Detach a wording (confirmed or suggested), an admin only; False when there was none."""
        self.require_role(actor, "admin", "wording_remove")
        removed = self.cache.remove_wordings([wording_id])
        for wording in removed:
            self.staff_store.record(actor, "wording_remove", wording.entry_id, details=_wording(wording))
        return bool(removed)

    def suggested_wordings(self, actor: str, limit: int = 200) -> list[Suggestion]:
        """Customer questions an approved answer grounded, waiting to be confirmed or dropped, oldest first."""
        self.require_role(actor, "agent", "list_suggestions")
        return self.cache.suggested_wordings(limit)

    def decide_suggestions(self, actor: str, wording_ids: list[int], confirm: bool) -> int:
        """Confirm (they match from now on) or drop suggested wordings in bulk, an admin only; returns how
        many were still suggested. One audit row per wording."""
        action = "wording_confirm" if confirm else "wording_drop"
        self.require_role(actor, "admin", action)
        pending = {s.wording.id for s in self.cache.suggested_wordings(limit=100_000)}
        chosen = [i for i in wording_ids if i in pending]
        decided = self.cache.confirm_wordings(chosen) if confirm else self.cache.remove_wordings(chosen)
        for wording in decided:
            self.staff_store.record(actor, action, wording.entry_id, details=_wording(wording))
        return len(decided)

    def merge_entries(self, actor: str, kept_id: int, merged_id: int) -> MergeResult:
        """Merge entry `merged_id` into `kept_id`, an admin only: the merged question becomes a confirmed
        wording, its wordings and replies move, it is deleted. KeyError for an unknown entry."""
        self.require_role(actor, "admin", "merge", kept_id)
        merged = self.cache.get_entry(merged_id)
        if kept_id == merged_id:
            raise InputError("An entry cannot be merged into itself.")
        if merged is None:
            raise KeyError(f"no entry {merged_id}")
        result = self.cache.merge_entries(kept_id, merged_id, actor)
        details = {"merged_id": merged_id, "merged": _texts(merged.question, merged.answer),
                   "moved_wordings": result.moved_wordings, "moved_replies": result.moved_replies}
        self.staff_store.record(actor, "merge", kept_id, target=f"entry:{merged_id}", details=details)
        return result

    # --- edit proposals ----------------------------------------------------------------------------

    def propose_edit(self, actor: str, entry_id: int, question: str, answer: str) -> int:
        """Store an agent's (or admin's) proposed edit for an admin to apply; returns the proposal id."""
        self.require_role(actor, "agent", "propose", entry_id)
        entry = self.cache.get_entry(entry_id)
        if entry is None:
            raise KeyError(f"no entry {entry_id}")
        if not question.strip() or not answer.strip():
            raise InputError("Question and answer must not be empty.")
        if (question, answer) == (entry.question, entry.answer):
            raise InputError("The proposal changes nothing.")
        proposal_id = self.staff_store.add_proposal(entry_id, question, answer, actor)
        details = {"proposal_id": proposal_id, "after": _texts(question, answer)}
        self.staff_store.record(actor, "propose", entry_id, details=details)
        return proposal_id

    def pending_proposals(self, actor: str) -> list[ProposalRecord]:
        self.require_role(actor, "agent", "list_proposals")
        return self.staff_store.pending_proposals()

    def apply_proposal(self, actor: str, proposal_id: int) -> bool:
        """Apply a pending proposal as an edit (audited as that edit); False when it is no longer pending."""
        proposal = self.staff_store.get_proposal(proposal_id)
        self.require_role(actor, "admin", "edit", proposal.entry_id if proposal else None)
        if proposal is None or proposal.status != "pending":
            return False
        if not self.staff_store.decide_proposal(proposal_id, "applied", actor):  # first, so it applies only once
            return False
        try:
            if self.edit_entry(actor, proposal.entry_id, proposal.question, proposal.answer, proposal_id):
                return True
            reason = "the entry already reads like this"
        except KeyError:
            reason = "the entry was deleted"
        details = {"proposal_id": proposal_id, "reason": reason}
        self.staff_store.record(actor, "dismiss_proposal", proposal.entry_id, details=details)
        return False

    def dismiss_proposal(self, actor: str, proposal_id: int) -> bool:
        proposal = self.staff_store.get_proposal(proposal_id)
        self.require_role(actor, "admin", "dismiss_proposal", proposal.entry_id if proposal else None)
        if proposal is None or not self.staff_store.decide_proposal(proposal_id, "dismissed", actor):
            return False
        self.staff_store.record(actor, "dismiss_proposal", proposal.entry_id, details={"proposal_id": proposal_id})
        return True

    # --- served replies ----------------------------------------------------------------------------

    def replies_for_entry(self, actor: str, entry_id: int) -> list[ReplyRecord]:
        self.require_role(actor, "agent", "list_replies", entry_id)
        return self.cache.replies_for_entry(entry_id)

    def recent_replies(self, actor: str, limit: int = 50, outcomes: tuple[str, ...] = ()) -> list[ReplyRecord]:
        """The newest served replies; with `outcomes`, only those (the cut and handed-off ones: answers to write)."""
        self.require_role(actor, "agent", "list_replies")
        return self.cache.recent_replies(limit=limit, outcomes=outcomes)

    def verify(self, actor: str, reply_id: int) -> Verification:
        """Rerun a reply with its decoding rule one token at a time (waits for the model); KeyError or
        ValueError if it cannot."""
        self.require_role(actor, "agent", "verify")
        return self.chat.verify(reply_id)

    # --- knowledge base ----------------------------------------------------------------------------

    def list_articles(self, actor: str) -> list[ArticleRecord]:
        self.require_role(actor, "agent", "list_articles")
        return self.cache.list_articles()

    def get_article(self, actor: str, article_id: str) -> ArticleRecord | None:
        self.require_role(actor, "agent", "open_article")
        return self.cache.get_article(article_id)

    def save_article(self, actor: str, article_id: str, title: str, body: str) -> ArticleRecord:
        """Create or replace an article (re-embedded, so matching questions find it at once).

        Raises InputError when the id, title or body is empty.
        """
        self.require_role(actor, "admin", "article_save")
        article_id, title, body = article_id.strip(), title.strip(), body.strip()
        if not article_id or not title or not body:
            raise InputError("An article needs an id, a title and a body.")
        before = self.cache.get_article(article_id)
        saved = self.cache.upsert_article(article_id, title, body)
        details = {"before": _article(before) if before else None, "after": _article(saved)}
        self.staff_store.record(actor, "article_save", target=f"article:{article_id}", details=details)
        return saved

    def delete_article(self, actor: str, article_id: str) -> bool:
        self.require_role(actor, "admin", "article_delete")
        article_id = article_id.strip()
        before = self.cache.get_article(article_id)
        if before is None or not self.cache.delete_article(article_id):
            return False
        self.staff_store.record(actor, "article_delete", target=f"article:{article_id}",
                              details={"before": _article(before)})
        return True

    # --- dashboard and transfer --------------------------------------------------------------------

    def dashboard_stats(self, actor: str) -> DashboardStats:
        self.require_role(actor, "agent", "dashboard")
        return self.cache.dashboard_stats()

    def engine_summary(self, actor: str) -> EngineSummary:
        self.require_role(actor, "agent", "dashboard")
        engine = self.chat.engine
        stored = self.cache.deployment_setting(step_width_key(engine.model_id, engine.model))
        chosen = (int(stored) or None) if stored is not None else None  # the database keeps one-token steps as "0"
        return EngineSummary(self.chat.describe(), engine.recipe.step_width, chosen, stored is not None)

    def reply_series(self, actor: str) -> list[dict]:
        """One point per reply, oldest first: created_at, speedup, tokens_per_forward_pass, seconds_saved."""
        self.require_role(actor, "agent", "dashboard")
        return self.cache.reply_series()

    def export_jsonl(self, actor: str, path: str | Path) -> int:
        """Write every cached answer and article to `path` as JSON Lines; returns the number of lines."""
        self.require_role(actor, "admin", "export")
        count = self.cache.export_jsonl(path)
        self.staff_store.record(actor, "export", target=Path(path).name, details={"records": count})
        return count

    def import_jsonl(self, actor: str, path: str | Path, approve: bool = False) -> int:
        """Add or update the records of an export in one transaction; ValueError (nothing imported) on a bad line.

        `approve` marks every imported answer approved; otherwise each keeps the review state in the file.
        """
        self.require_role(actor, "admin", "import")
        count = self.cache.import_jsonl(path, approve=approve)
        details = {"records": count, "approved": approve}
        self.staff_store.record(actor, "import", target=Path(path).name, details=details)
        return count

    # --- staff accounts and the audit log -----------------------------------------------------------

    def list_users(self, actor: str) -> list[StaffRecord]:
        self.require_role(actor, "admin", "list_users")
        return self.accounts.list()

    def add_user(self, actor: str, name: str, role: str, password: str) -> None:
        self.require_role(actor, "admin", "user_add")
        self.accounts.add(name, role, password, actor)

    def reset_password(self, actor: str, name: str, password: str) -> None:
        self.require_role(actor, "admin", "user_reset")
        self.accounts.reset_password(name, password, actor)

    def set_role(self, actor: str, name: str, role: str) -> None:
        self.require_role(actor, "admin", "user_role")
        self.accounts.set_role(name, role, actor)

    def remove_user(self, actor: str, name: str) -> None:
        self.require_role(actor, "admin", "user_remove")
        self.accounts.remove(name, actor)

    def audit(self, actor: str, which: AuditFilter = ALL, limit: int = 200) -> list[AuditRecord]:
        self.require_role(actor, "admin", "read_audit")
        return self.staff_store.audit(which, limit)

    def export_audit(self, actor: str, path: str | Path, which: AuditFilter = ALL) -> int:
        """Write the matching audit rows to `path` as JSON Lines, oldest first; returns how many.

        Reading the log is not itself a staff action on the data, so it leaves no audit row.
        """
        self.require_role(actor, "admin", "export_audit")
        count = 0
        with open(path, "w", encoding="utf-8") as out:
            for record in self.staff_store.iter_audit(which):
                out.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
                count += 1
        return count


def _texts(question: str, answer: str) -> dict:
    return {"question": question, "answer": answer}


def _wording(wording: WordingRecord) -> dict:
    return {"wording_id": wording.id, "question": wording.question, "status": wording.status}


def _article(article: ArticleRecord) -> dict:
    return {"title": article.title, "body": article.body}
