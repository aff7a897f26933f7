"""Admin tab: browse, search, open, edit, approve, reject and delete cached answers; propose edits and apply
proposals."""

from dataclasses import dataclass

import gradio as gr

from chatbot import REVIEW_STATES, SORTS, AdminService, CachedAnswer, InputError

from .admin_wordings import WordingsPanel
from .auth import PRIVATE, StaffLogin, shows_refusals
from .widgets import (
    AUDIT_COLUMNS,
    REPLY_COLUMNS,
    audit_row,
    confirmed_delete,
    hidden_button,
    parse_ids,
    reply_row,
    row_picker,
    shorten,
    utc_time,
)

PAGE_SIZE = 20
PROPOSAL_COLUMNS = ["proposal", "entry", "by", "question", "answer", "proposed (UTC)"]
REVIEW_FILTERS = ["all", *REVIEW_STATES]
ENTRY_COLUMNS = ["id", "review", "question", "answer", "hits", "uses", "speedup", "created (UTC)"]
ENTRY_WIDTHS = ["5%", "8%", "27%", "37%", "5%", "5%", "6%", "7%"]
NOTICE = (
    "**Approved** answers guide replies: the most similar one is put into the prompt of a reworded question, "
    "so approving or editing an answer (an edit approves it) changes what the bot says to such questions. "
    "**Candidate** (the model's own, unreviewed) and **rejected** answers can change only speed, never what the "
    "bot answers. Every reply is still exactly the model's greedy reply to its prompt. A customer's thumbs-up "
    "approves nothing."
)


@dataclass
class EntryView:
    entry_id: gr.Number
    question: gr.Textbox
    answer: gr.Textbox
    stats: gr.JSON
    replies: gr.Dataframe
    history: gr.Dataframe
    status: gr.Markdown


class CacheBrowser:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can fill it on load."""
        gr.Markdown(NOTICE)
        with gr.Row():
            search = gr.Textbox(label="Search questions and answers", scale=4, elem_id="cache-search")
            sort = gr.Dropdown(list(SORTS), value="date", label="Sort by", scale=1)
            descending = gr.Checkbox(value=True, label="Descending", scale=1)
            review = gr.Dropdown(REVIEW_FILTERS, value="all", label="Review state", scale=1, elem_id="review-filter")
            go = gr.Button("Search", scale=1)
        table = gr.Dataframe(
            headers=ENTRY_COLUMNS, interactive=False, wrap=True, column_widths=ENTRY_WIDTHS, elem_id="cache-table"
        )
        with gr.Row():
            prev, info, nxt = gr.Button("◀ Previous"), gr.Markdown(), gr.Button("Next ▶")
        page = gr.State(0)
        self.query, self.page, self.table_outputs = [search, sort, descending, review], page, [table, info, page]
        go.click(self.list_page, [*self.query, page, gr.State(0)], self.table_outputs, api_name="list_entries")
        for trigger, step in ((search.submit, 0), (prev.click, -1), (nxt.click, 1), (review.change, 0)):
            trigger(self.list_page, [*self.query, page, gr.State(step)], self.table_outputs, **PRIVATE)
        self._bulk_review()
        self._entry_panel(table)
        return table

    def _bulk_review(self) -> None:
        with gr.Row():
            ids = gr.Textbox(label="Entry ids to review, e.g. 3, 7, 10-14", scale=4, elem_id="bulk-ids")
            approve = gr.Button("Approve", scale=1, elem_id="bulk-approve")
            reject = gr.Button("Reject", scale=1, elem_id="bulk-reject")
        status = gr.Markdown(elem_id="bulk-status")
        # For API clients, with the state as a parameter; wired first, so this event keeps the plain API name.
        state = gr.Dropdown(list(REVIEW_STATES), value="approved", visible=False)
        gr.Button(visible=False).click(self.review_entries, [ids, state], [status], api_name="review_entries")
        approve.click(self.review_entries, [ids, gr.State("approved")], [status], **PRIVATE).then(
            self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE
        )
        reject.click(self.review_entries, [ids, gr.State("rejected")], [status], **PRIVATE).then(
            self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE
        )

    def _entry_panel(self, table: gr.Dataframe) -> None:
        gr.Markdown("### Entry")
        with gr.Row():
            entry_id = gr.Number(label="Entry id (or click a row)", precision=0, scale=1, elem_id="entry-id")
            open_button = gr.Button("Open", scale=1)
        view = EntryView(
            entry_id, gr.Textbox(label="Question", elem_id="entry-question"),
            gr.Textbox(label="Answer", lines=8, elem_id="entry-answer"), gr.JSON(label="Stats when it was decoded"),
            gr.Dataframe(headers=REPLY_COLUMNS, label="Replies served from this entry", interactive=False),
            gr.Dataframe(headers=AUDIT_COLUMNS, label="History of this entry", interactive=False,
                         elem_id="entry-history"),
            gr.Markdown(elem_id="entry-status"),
        )
        shown = [view.question, view.answer, view.stats, view.replies, view.history, view.status]
        self.shown = shown
        opened = [
            open_button.click(self.open_entry, [entry_id], shown, api_name="open_entry"),
            table.select(row_picker(self.login), None, [entry_id], **PRIVATE).then(
                self.open_entry, [entry_id], shown, **PRIVATE
            ),
        ]
        self._edit_buttons(view)
        WordingsPanel(self.admin, self.login).build(entry_id, opened, self._refresh_table)
        self._proposals()

    def _edit_buttons(self, view: EntryView) -> None:
        with gr.Row():
            save = gr.Button("Save changes (admin; approves the answer)", variant="primary", elem_id="save-entry")
            propose = gr.Button("Propose this edit", elem_id="propose-edit")
            approve = gr.Button("Approve", elem_id="entry-approve")
            reject = gr.Button("Reject", elem_id="entry-reject")
            confirm = confirmed_delete("Delete entry")
        for button, review in ((approve, "approved"), (reject, "rejected")):
            button.click(self.review_one, [view.entry_id, gr.State(review)], [view.status], **PRIVATE).then(
                self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE
            )
        texts = [view.entry_id, view.question, view.answer]
        save.click(self.save_entry, texts, [view.status], api_name="edit_entry")
        propose.click(self.propose_edit, texts, [view.status], api_name="propose_edit")
        confirm.click(self.delete_entry, [view.entry_id], [view.status, confirm], api_name="delete_entry").then(
            self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE
        )

    def _refresh_table(self, event) -> None:
        """Reload the entries table after `event` (a merge removes a row)."""
        event.then(self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE)

    def _proposals(self) -> None:
        gr.Markdown("### Proposed edits\nAgents propose edits; an admin applies or dismisses them.")
        refresh = gr.Button("Refresh proposals", size="sm")
        table = gr.Dataframe(headers=PROPOSAL_COLUMNS, interactive=False, wrap=True, elem_id="proposal-table")
        with gr.Row():
            proposal_id = gr.Number(label="Proposal id (or click a row)", precision=0, elem_id="proposal-id")
            apply = gr.Button("Apply", variant="primary", elem_id="apply-proposal")
            dismiss = gr.Button("Dismiss", elem_id="dismiss-proposal")
        status = gr.Markdown(elem_id="proposal-status")
        refresh.click(self.list_proposals, None, [table], api_name="list_proposals")
        table.select(row_picker(self.login), None, [proposal_id], **PRIVATE)
        apply.click(self.apply_proposal, [proposal_id], [status], api_name="apply_proposal").then(
            self.list_proposals, None, [table], **PRIVATE
        )
        dismiss.click(self.dismiss_proposal, [proposal_id], [status], api_name="dismiss_proposal").then(
            self.list_proposals, None, [table], **PRIVATE
        )

    # --- handlers ----------------------------------------------------------------------------------

    @shows_refusals
    def list_page(
        self, search: str, sort: str, descending: bool, review: str, page: int, step: int, request: gr.Request
    ):
        """One page of entries; `step` moves a page back (-1) or forward (1), 0 stays (or starts over)."""
        user = self.login.require(request)
        state = None if review in (None, "", "all") else review
        total = self.admin.list_entries(user, search, sort, descending, limit=1, review=state).total
        last = max(0, (total - 1) // PAGE_SIZE)
        page = min(max(0, page + step), last)
        entries = self.admin.list_entries(
            user, search, sort, descending, limit=PAGE_SIZE, offset=page * PAGE_SIZE, review=state
        )
        info = f"Page {page + 1} of {last + 1} · {total} entries" + (f" ({state})" if state else "")
        return [_entry_row(e) for e in entries.entries], info, page

    @shows_refusals
    def open_entry(self, entry_id: float | None, request: gr.Request):
        """The entry's question, answer and stats, the replies served from it and its history."""
        user = self.login.require(request)
        history = [audit_row(r) for r in self.admin.entry_history(user, int(entry_id))] if entry_id else []
        entry = self.admin.get_entry(user, int(entry_id)) if entry_id else None
        if entry is None:
            return "", "", None, [], history, f"No entry with id {entry_id}."
        replies = [reply_row(r) for r in self.admin.replies_for_entry(user, entry.id)]
        status = (
            f"Entry #{entry.id} ({entry.review}): {entry.hits} exact hits, used {entry.uses} times as a reference."
        )
        return entry.question, entry.answer, entry.stats, replies, history, status

    @shows_refusals
    def save_entry(self, entry_id: float | None, question: str, answer: str, request: gr.Request) -> str:
        user = self.login.require(request)
        if not entry_id:
            return f"No entry with id {entry_id}."
        try:
            changed = self.admin.edit_entry(user, int(entry_id), question, answer)
        except KeyError:
            return f"No entry with id {entry_id}."
        except InputError as err:
            return str(err)
        return f"Saved entry #{int(entry_id)}." if changed else "Nothing changed."

    @shows_refusals
    def review_entries(self, ids: str, review: str, request: gr.Request) -> str:
        """Approve or reject the entries named in `ids` ("3, 7, 10-14"); an admin only."""
        user = self.login.require(request)
        try:
            entry_ids = parse_ids(ids)
            found = self.admin.set_review(user, entry_ids, review)
        except (ValueError, InputError) as err:
            return str(err)
        missing = len(entry_ids) - found
        note = f" ({missing} of the ids name no entry)" if missing else ""
        return f"{review.capitalize()} {found} entr{'y' if found == 1 else 'ies'}{note}."

    @shows_refusals
    def review_one(self, entry_id: float | None, review: str, request: gr.Request) -> str:
        user = self.login.require(request)
        if not entry_id or not self.admin.set_review(user, [int(entry_id)], review):
            return f"No entry with id {entry_id}."
        return f"Entry #{int(entry_id)} is now {review}."

    @shows_refusals
    def delete_entry(self, entry_id: float | None, request: gr.Request):
        user = self.login.require(request)
        deleted = bool(entry_id) and self.admin.delete_entry(user, int(entry_id))
        status = f"Deleted entry #{int(entry_id)}." if deleted else f"No entry with id {entry_id}."
        return status, hidden_button()

    @shows_refusals
    def propose_edit(self, entry_id: float | None, question: str, answer: str, request: gr.Request) -> str:
        user = self.login.require(request)
        if not entry_id:
            return f"No entry with id {entry_id}."
        try:
            proposal_id = self.admin.propose_edit(user, int(entry_id), question, answer)
        except KeyError:
            return f"No entry with id {entry_id}."
        except InputError as err:
            return str(err)
        return f"Proposed edit #{proposal_id} of entry #{int(entry_id)}; an admin will review it."

    @shows_refusals
    def list_proposals(self, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        return [
            [p.id, p.entry_id, p.proposed_by, shorten(p.question), shorten(p.answer), utc_time(p.created_at)]
            for p in self.admin.pending_proposals(user)
        ]

    @shows_refusals
    def apply_proposal(self, proposal_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        applied = bool(proposal_id) and self.admin.apply_proposal(user, int(proposal_id))
        return f"Applied proposal #{int(proposal_id)}." if applied else f"Proposal {proposal_id} was not applied."

    @shows_refusals
    def dismiss_proposal(self, proposal_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        dismissed = bool(proposal_id) and self.admin.dismiss_proposal(user, int(proposal_id))
        return f"Dismissed proposal #{int(proposal_id)}." if dismissed else f"No pending proposal {proposal_id}."


def _entry_row(entry: CachedAnswer) -> list:
    return [
        entry.id, entry.review, shorten(entry.question), shorten(entry.answer), entry.hits, entry.uses,
        entry.speedup, utc_time(entry.created_at),
    ]
