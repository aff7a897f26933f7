"""Admin tabs: verify a reply against its decoding rule decoded step by step; export and import the cache and
articles."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import gradio as gr

from chatbot import UNANSWERED, AdminService, InputError

from .auth import PRIVATE, StaffLogin, shows_refusals
from .format import escape_markup
from .widgets import REPLY_COLUMNS, reply_row, row_picker


class ReplyVerifier:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can refresh it on tab select."""
        gr.Markdown(
            "Verify reruns a reply's prompt with its decoding rule one token at a time (greedy, with the rule's "
            "repetition control and grounded numbers), checks the tokens are identical and "
            "measures the real speedup. It uses the model, so it waits for chat turns in progress. A reply that an "
            "approved answer grounded can become that answer's new words after review: replies copy more of the "
            "model's own phrasing than of staff-written text."
        )
        with gr.Row():
            refresh = gr.Button("Refresh recent replies")
            unserved = gr.Checkbox(label="Only replies cut or handed off (answers to write)", value=False,
                                   elem_id="only-unanswered")
        self.only_unanswered = unserved
        table = gr.Dataframe(headers=REPLY_COLUMNS, interactive=False, label="Recent replies", elem_id="reply-table")
        with gr.Row():
            reply_id = gr.Number(label="Reply id (or click a row)", precision=0, elem_id="verify-id")
            verify = gr.Button("Verify", variant="primary", elem_id="verify")
            adopt = gr.Button("Approve its words as the grounding answer (admin)", elem_id="adopt-reply")
        result = gr.Markdown(elem_id="verify-result")
        adopt.click(self.adopt, [reply_id], [result], api_name="adopt_reply")
        refresh.click(self.recent, [unserved], [table], **PRIVATE)
        unserved.change(self.recent, [unserved], [table], **PRIVATE)
        table.select(row_picker(self.login), None, [reply_id], **PRIVATE)
        verify.click(self.verify, [reply_id], [result], api_name="verify", concurrency_limit=1).then(
            self.recent, [unserved], [table], **PRIVATE
        )
        return table

    @shows_refusals
    def recent(self, only_unanswered: bool, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        outcomes = UNANSWERED if only_unanswered else ()
        return [reply_row(r) for r in self.admin.recent_replies(user, limit=50, outcomes=outcomes)]

    @shows_refusals
    def adopt(self, reply_id: float | None, request: gr.Request) -> str:
        """A grounded reply's words become the answer of the approved entry that grounded it."""
        user = self.login.require(request)
        if not reply_id:
            return "Enter a reply id (pick one from the table)."
        try:
            entry_id = self.admin.adopt_reply(user, int(reply_id))
        except (KeyError, InputError) as err:
            return f"Cannot use reply {int(reply_id)}: {escape_markup(str(err))}"
        return f"Entry #{entry_id} now answers with the words of reply {int(reply_id)}."

    @shows_refusals
    def verify(self, reply_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        if not reply_id:
            return "Enter a reply id (pick one from the table)."
        try:
            check = self.admin.verify(user, int(reply_id))
        except (KeyError, ValueError) as err:
            return f"Cannot verify reply {int(reply_id)}: {escape_markup(str(err))}"
        verdict = "identical to" if check.identical else "DIFFERS from"
        return (
            f"**Reply {check.reply_id}: {verdict} step-by-step decoding.**  \n"
            f"Step by step took {check.greedy_seconds:.2f} s, the reply took {check.reply_seconds:.2f} s: "
            f"measured speedup **{check.measured_speedup:.2f}x**."
        )


class Transfer:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login
        self.export_dir = Path(tempfile.mkdtemp(prefix="chatbot-export-"))

    def build(self) -> None:
        gr.Markdown(
            "Export writes every cached answer and help article as JSON Lines. Import adds or updates the records "
            "of such a file in one transaction: a bad line imports nothing. Each answer keeps the review state the "
            "file gives it (candidate when none), unless you mark them all approved."
        )
        with gr.Row():
            with gr.Column():
                export = gr.Button("Export cache and articles")
                exported = gr.File(label="Export", interactive=False, elem_id="export-file")
            with gr.Column():
                upload = gr.File(label="JSONL file to import", file_types=[".jsonl"], elem_id="import-file")
                approve = gr.Checkbox(value=False, label="Mark imported answers approved", elem_id="import-approve")
                run_import = gr.Button("Import")
                status = gr.Markdown(elem_id="import-status")
        export.click(self.export, None, [exported], api_name="export")
        run_import.click(self.import_file, [upload, approve], [status], api_name="import")

    @shows_refusals
    def export(self, request: gr.Request) -> str:
        user = self.login.require(request)
        path = self.export_dir / f"helpdesk-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}.jsonl"
        self.admin.export_jsonl(user, path)
        return str(path)

    @shows_refusals
    def import_file(self, path: str | None, approve: bool, request: gr.Request) -> str:
        user = self.login.require(request)
        if not path:
            return "Choose a .jsonl file first."
        try:
            count = self.admin.import_jsonl(user, path, approve=bool(approve))
        except (ValueError, UnicodeDecodeError) as err:
            return f"Nothing imported: {escape_markup(str(err))}"
        return f"Imported {count} records."
