"""The entry panel's wordings: the other wordings an entry answers, attaching and removing them, merging another
entry into it; and the suggested wordings (customer questions an approved answer grounded) confirmed or dropped
in bulk. Only confirmed wordings ever match a customer's question."""

from collections.abc import Callable

import gradio as gr

from chatbot import AdminService, InputError, Suggestion, WordingRecord

from .auth import PRIVATE, StaffLogin, shows_refusals
from .widgets import parse_ids, row_picker, shorten, utc_time

WORDING_COLUMNS = ["wording id", "status", "wording", "added by", "added (UTC)"]
SUGGESTION_COLUMNS = ["wording id", "entry", "suggested wording", "the entry's question"]
NOTICE = (
    "**Wordings.** An entry answers its question and every **confirmed** wording below: a customer's question "
    "is compared with each, and the entry scores by its best. A question an approved answer grounded comes back "
    "as a **suggested** wording; it matches nothing until staff confirm it."
)


class WordingsPanel:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self, entry_id: gr.Number, opened: list, refresh_entries: Callable) -> None:
        """Lay out the entry's wordings under its panel; `opened` are the events that open an entry."""
        gr.Markdown(NOTICE)
        table = gr.Dataframe(headers=WORDING_COLUMNS, interactive=False, wrap=True, elem_id="wording-table")
        with gr.Row():
            new = gr.Textbox(label="Another wording of this question", scale=4, elem_id="new-wording")
            add = gr.Button("Add wording", scale=1, elem_id="add-wording")
        with gr.Row():
            wording_id = gr.Number(label="Wording id (or click a row)", precision=0, elem_id="wording-id")
            remove = gr.Button("Remove wording", elem_id="remove-wording")
            merged_id = gr.Number(label="Entry id to merge into this one", precision=0, elem_id="merge-id")
            merge = gr.Button("Merge into this entry", elem_id="merge-entry")
        status = gr.Markdown(elem_id="wording-status")
        for event in opened:
            event.then(self.list_wordings, [entry_id], [table], **PRIVATE)
        table.select(row_picker(self.login), None, [wording_id], **PRIVATE)
        add.click(self.add_wording, [entry_id, new], [status], api_name="add_wording").then(
            self.list_wordings, [entry_id], [table], **PRIVATE)
        remove.click(self.remove_wording, [wording_id], [status], api_name="remove_wording").then(
            self.list_wordings, [entry_id], [table], **PRIVATE)
        merged = merge.click(self.merge, [entry_id, merged_id], [status], api_name="merge_entries").then(
            self.list_wordings, [entry_id], [table], **PRIVATE)
        refresh_entries(merged)
        self._suggestions()

    def _suggestions(self) -> None:
        gr.Markdown("### Suggested wordings\nConfirm the ones that ask what their entry answers; drop the rest.")
        refresh = gr.Button("Refresh suggestions", size="sm", elem_id="refresh-suggestions")
        table = gr.Dataframe(headers=SUGGESTION_COLUMNS, interactive=False, wrap=True, elem_id="suggestion-table")
        with gr.Row():
            ids = gr.Textbox(label="Wording ids, e.g. 3, 7, 10-14", scale=4, elem_id="suggestion-ids")
            confirm = gr.Button("Confirm", variant="primary", scale=1, elem_id="confirm-suggestions")
            drop = gr.Button("Drop", scale=1, elem_id="drop-suggestions")
        status = gr.Markdown(elem_id="suggestion-status")
        refresh.click(self.list_suggestions, None, [table], api_name="list_suggestions")
        for button, keep in ((confirm, True), (drop, False)):
            button.click(self.decide, [ids, gr.State(keep)], [status], **PRIVATE).then(
                self.list_suggestions, None, [table], **PRIVATE)

    # --- handlers ----------------------------------------------------------------------------------

    @shows_refusals
    def list_wordings(self, entry_id: float | None, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        return [_wording_row(w) for w in self.admin.wordings(user, int(entry_id))] if entry_id else []

    @shows_refusals
    def add_wording(self, entry_id: float | None, question: str, request: gr.Request) -> str:
        user = self.login.require(request)
        if not entry_id:
            return "Open an entry first."
        try:
            added = self.admin.add_wording(user, int(entry_id), question or "")
        except KeyError:
            return f"No entry with id {entry_id}."
        except InputError as err:
            return str(err)
        return f"Added wording #{added.id} to entry #{int(entry_id)}." if added else "The entry has this wording."

    @shows_refusals
    def remove_wording(self, wording_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        removed = bool(wording_id) and self.admin.remove_wording(user, int(wording_id))
        return f"Removed wording #{int(wording_id)}." if removed else f"No wording with id {wording_id}."

    @shows_refusals
    def merge(self, entry_id: float | None, merged_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        if not entry_id or not merged_id:
            return "Open an entry and give the id of the entry to merge into it."
        try:
            result = self.admin.merge_entries(user, int(entry_id), int(merged_id))
        except KeyError as err:
            return f"No such entry ({err.args[0]})."
        except InputError as err:
            return str(err)
        return (f"Merged entry #{result.merged_id} into #{result.kept_id}: {result.moved_wordings} wording(s) and "
                f"{result.moved_replies} repl{'y' if result.moved_replies == 1 else 'ies'} moved.")

    @shows_refusals
    def list_suggestions(self, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        return [_suggestion_row(s) for s in self.admin.suggested_wordings(user)]

    @shows_refusals
    def decide(self, ids: str, confirm: bool, request: gr.Request) -> str:
        user = self.login.require(request)
        try:
            decided = self.admin.decide_suggestions(user, parse_ids(ids), confirm)
        except ValueError as err:
            return str(err)
        return f"{'Confirmed' if confirm else 'Dropped'} {decided} suggested wording{'' if decided == 1 else 's'}."


def _wording_row(wording: WordingRecord) -> list:
    return [wording.id, wording.status, shorten(wording.question), wording.created_by or "customer",
            utc_time(wording.created_at)]


def _suggestion_row(suggestion: Suggestion) -> list:
    wording = suggestion.wording
    return [wording.id, wording.entry_id, shorten(wording.question), shorten(suggestion.entry_question)]
