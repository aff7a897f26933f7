"""Admin tab: browse, search, open, edit and delete cached answers."""

from dataclasses import dataclass

import gradio as gr

from cache.records import CachedAnswer, ReplyRecord
from chatbot import ChatService

from .auth import PRIVATE, AdminLogin

PAGE_SIZE = 20
SORTS = ["date", "hits", "speedup", "uses"]
ENTRY_COLUMNS = ["id", "question", "answer", "hits", "uses", "speedup", "created (UTC)"]
ENTRY_WIDTHS = ["5%", "30%", "40%", "5%", "5%", "7%", "8%"]
REPLY_COLUMNS = ["reply id", "time (UTC)", "question", "exact hit", "speedup", "feedback", "verified"]
NOTICE = (
    "**Editing a cached answer can change only speed, never what the bot answers** (replies are always "
    "verified against the model's own greedy choices)."
)
CELL_CHARS = 120


@dataclass
class EntryView:
    entry_id: gr.Number
    question: gr.Textbox
    answer: gr.Textbox
    stats: gr.JSON
    replies: gr.Dataframe
    status: gr.Markdown


class CacheBrowser:
    def __init__(self, service: ChatService, login: AdminLogin) -> None:
        self.service, self.cache, self.login = service, service.cache, login

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can fill it on load."""
        gr.Markdown(NOTICE)
        with gr.Row():
            search = gr.Textbox(label="Search questions and answers", scale=4, elem_id="cache-search")
            sort = gr.Dropdown(SORTS, value="date", label="Sort by", scale=1)
            descending = gr.Checkbox(value=True, label="Descending", scale=1)
            go = gr.Button("Search", scale=1)
        table = gr.Dataframe(
            headers=ENTRY_COLUMNS, interactive=False, wrap=True, column_widths=ENTRY_WIDTHS, elem_id="cache-table"
        )
        with gr.Row():
            prev, info, nxt = gr.Button("◀ Previous"), gr.Markdown(), gr.Button("Next ▶")
        page = gr.State(0)
        self.query, self.page, self.table_outputs = [search, sort, descending], page, [table, info, page]
        go.click(self.list_page, [*self.query, page, gr.State(0)], self.table_outputs, api_name="list_entries")
        for trigger, step in ((search.submit, 0), (prev.click, -1), (nxt.click, 1)):
            trigger(self.list_page, [*self.query, page, gr.State(step)], self.table_outputs, **PRIVATE)
        self._entry_panel(table)
        return table

    def _entry_panel(self, table: gr.Dataframe) -> None:
        gr.Markdown("### Entry")
        with gr.Row():
            entry_id = gr.Number(label="Entry id (or click a row)", precision=0, scale=1, elem_id="entry-id")
            open_button = gr.Button("Open", scale=1)
        view = EntryView(
            entry_id, gr.Textbox(label="Question", elem_id="entry-question"),
            gr.Textbox(label="Answer", lines=8, elem_id="entry-answer"), gr.JSON(label="Stats when it was decoded"),
            gr.Dataframe(headers=REPLY_COLUMNS, label="Replies served from this entry", interactive=False),
            gr.Markdown(elem_id="entry-status"),
        )
        shown = [view.question, view.answer, view.stats, view.replies, view.status]
        open_button.click(self.open_entry, [entry_id], shown, api_name="open_entry")
        table.select(self.pick_row, None, [entry_id], **PRIVATE).then(self.open_entry, [entry_id], shown, **PRIVATE)
        self._edit_buttons(view)

    def _edit_buttons(self, view: EntryView) -> None:
        with gr.Row():
            save = gr.Button("Save changes", variant="primary")
            delete = gr.Button("Delete entry", variant="stop")
            confirm = gr.Button("Really delete?", variant="stop", visible=False)
        save.click(self.save_entry, [view.entry_id, view.question, view.answer], [view.status], api_name="edit_entry")
        delete.click(_reveal, None, [confirm], **PRIVATE)
        confirm.click(self.delete_entry, [view.entry_id], [view.status, confirm], api_name="delete_entry").then(
            self.list_page, [*self.query, self.page, gr.State(0)], self.table_outputs, **PRIVATE
        )

    # --- handlers ----------------------------------------------------------------------------------

    def list_page(self, search: str, sort: str, descending: bool, page: int, step: int, request: gr.Request):
        """One page of entries; `step` moves a page back (-1) or forward (1), 0 stays (or starts over)."""
        self.login.require(request)
        total = self.cache.list_entries(search, sort, descending, limit=1).total
        last = max(0, (total - 1) // PAGE_SIZE)
        page = min(max(0, page + step), last)
        entries = self.cache.list_entries(search, sort, descending, limit=PAGE_SIZE, offset=page * PAGE_SIZE)
        info = f"Page {page + 1} of {last + 1} · {total} entries"
        return [_entry_row(e) for e in entries.entries], info, page

    def pick_row(self, evt: gr.SelectData, request: gr.Request) -> int:
        """Clicking a row opens its entry (the first column is the id)."""
        self.login.require(request)
        return int(evt.row_value[0])

    def open_entry(self, entry_id: float | None, request: gr.Request):
        """The entry's question, answer and stats, and the replies served from it."""
        self.login.require(request)
        entry = self.cache.get_entry(int(entry_id)) if entry_id else None
        if entry is None:
            return "", "", None, [], f"No entry with id {entry_id}."
        replies = [_reply_row(r) for r in self.cache.replies_for_entry(entry.id)]
        status = f"Entry #{entry.id}: {entry.hits} exact hits, used {entry.uses} times as a reference."
        return entry.question, entry.answer, entry.stats, replies, status

    def save_entry(self, entry_id: float | None, question: str, answer: str, request: gr.Request) -> str:
        self.login.require(request)
        entry = self.cache.get_entry(int(entry_id)) if entry_id else None
        if entry is None:
            return f"No entry with id {entry_id}."
        if not question.strip() or not answer.strip():
            return "Question and answer must not be empty."
        changes = {}
        if question != entry.question:
            changes["question"] = question
        if answer != entry.answer:
            changes.update(answer=answer, answer_ids=self._answer_ids(answer))
        if not changes:
            return "Nothing changed."
        self.cache.update_entry(entry.id, **changes)
        return f"Saved entry #{entry.id}."

    def delete_entry(self, entry_id: float | None, request: gr.Request):
        self.login.require(request)
        deleted = bool(entry_id) and self.cache.delete_entry(int(entry_id))
        status = f"Deleted entry #{int(entry_id)}." if deleted else f"No entry with id {entry_id}."
        return status, gr.Button(visible=False)

    def _answer_ids(self, answer: str) -> list[int]:
        """Token ids of an edited answer as decoding copies them: the text, then end of sequence."""
        tokenizer = self.service.tokenizer
        return [*tokenizer(answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]


def _entry_row(entry: CachedAnswer) -> list:
    speedup = entry.stats.get("speedup")
    return [
        entry.id, _cell(entry.question), _cell(entry.answer), entry.hits, entry.uses,
        speedup if isinstance(speedup, int | float) else None, entry.created_at.strftime("%Y-%m-%d %H:%M"),
    ]


def _reply_row(reply: ReplyRecord) -> list:
    feedback = {1: "up", -1: "down"}.get(reply.feedback, "")
    if reply.feedback_reason:
        feedback += f" {reply.feedback_reason}"
    verified = {True: "identical", False: "DIFFERS", None: ""}[reply.verified]
    return [
        reply.id, reply.created_at.strftime("%Y-%m-%d %H:%M:%S"), _cell(reply.question), reply.exact_hit,
        reply.stats.get("speedup"), feedback, verified,
    ]


def _cell(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _reveal() -> gr.Button:
    return gr.Button(visible=True)
