"""Admin tabs: staff accounts (add, reset a password, change a role, remove) and the audit log with its export."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import gradio as gr

from chatbot import ACTIONS, ROLES, AdminService, AuditFilter, InputError

from .auth import PRIVATE, StaffLogin, shows_refusals
from .format import escape_markup
from .widgets import AUDIT_COLUMNS, audit_row, utc_time

USER_COLUMNS = ["name", "role", "created (UTC)", "changed (UTC)"]
AUDIT_ROWS_SHOWN = 200


class StaffManager:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can fill it when the tab is picked."""
        gr.Markdown(
            "**agent**: reads the cache, replies and feedback, proposes edits. **admin**: everything, "
            "including approving, editing, deleting, import/export, help articles and these accounts."
        )
        table = gr.Dataframe(headers=USER_COLUMNS, interactive=False, elem_id="user-table")
        with gr.Row():
            name = gr.Textbox(label="User name", elem_id="user-name")
            role = gr.Dropdown(list(ROLES), value="agent", label="Role", elem_id="user-role")
            password = gr.Textbox(label="New password (8+ characters)", type="password", elem_id="user-password")
        with gr.Row():
            add = gr.Button("Add user", variant="primary", elem_id="add-user")
            reset = gr.Button("Set password", elem_id="reset-user")
            change_role = gr.Button("Set role", elem_id="role-user")
            remove = gr.Button("Remove user", variant="stop", elem_id="remove-user")
        status = gr.Markdown(elem_id="user-status")
        refresh = gr.Button("Refresh list", size="sm")
        refresh.click(self.list_users, None, [table], api_name="list_users")
        table.select(_pick_user, None, [name, role], **PRIVATE)
        for button, handler, inputs, api_name in (
            (add, self.add_user, [name, role, password], "add_user"),
            (reset, self.reset_password, [name, password], "reset_password"),
            (change_role, self.set_role, [name, role], "set_role"),
            (remove, self.remove_user, [name], "remove_user"),
        ):
            button.click(handler, inputs, [status, password], api_name=api_name).then(
                self.list_users, None, [table], **PRIVATE
            )
        return table

    @shows_refusals
    def list_users(self, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        return [[u.name, u.role, utc_time(u.created_at), utc_time(u.updated_at)] for u in self.admin.list_users(user)]

    @shows_refusals
    def add_user(self, name: str, role: str, password: str, request: gr.Request):
        user = self.login.require(request)
        return _outcome(lambda: self.admin.add_user(user, name, role, password), f"Added {role} **{name}**.")

    @shows_refusals
    def reset_password(self, name: str, password: str, request: gr.Request):
        user = self.login.require(request)
        return _outcome(lambda: self.admin.reset_password(user, name, password), f"New password set for **{name}**.")

    @shows_refusals
    def set_role(self, name: str, role: str, request: gr.Request):
        user = self.login.require(request)
        return _outcome(lambda: self.admin.set_role(user, name, role), f"**{name}** is now {role}.")

    @shows_refusals
    def remove_user(self, name: str, request: gr.Request):
        user = self.login.require(request)
        return _outcome(lambda: self.admin.remove_user(user, name), f"Removed **{name}**.")


class AuditLog:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login
        self.export_dir = Path(tempfile.mkdtemp(prefix="chatbot-audit-"))

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can fill it when the tab is picked."""
        gr.Markdown("Every staff action, newest first: logins, edits with before and after, deletes, imports, ...")
        with gr.Row():
            actor = gr.Textbox(label="Person", elem_id="audit-actor")
            action = gr.Dropdown(["", *ACTIONS], value="", label="Action", elem_id="audit-action")
            entry_id = gr.Number(label="Entry id", precision=0, elem_id="audit-entry")
            show = gr.Button("Show", variant="primary", elem_id="audit-show")
        table = gr.Dataframe(headers=AUDIT_COLUMNS, interactive=False, wrap=True, elem_id="audit-table")
        with gr.Row():
            export = gr.Button("Export these rows (JSON Lines)", elem_id="audit-export")
            exported = gr.File(label="Audit export", interactive=False, elem_id="audit-file")
        filters = [actor, action, entry_id]
        show.click(self.rows, filters, [table], api_name="audit")
        export.click(self.export, filters, [exported], api_name="export_audit")
        self.filters = filters
        return table

    @shows_refusals
    def rows(self, actor: str, action: str, entry_id: float | None, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        records = self.admin.audit(user, _filter(actor, action, entry_id), limit=AUDIT_ROWS_SHOWN)
        return [audit_row(r) for r in records]

    @shows_refusals
    def export(self, actor: str, action: str, entry_id: float | None, request: gr.Request) -> str:
        user = self.login.require(request)
        path = self.export_dir / f"audit-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}.jsonl"
        self.admin.export_audit(user, path, _filter(actor, action, entry_id))
        return str(path)


def _filter(actor: str | None, action: str | None, entry_id: float | None) -> AuditFilter:
    return AuditFilter((actor or "").strip(), action or "", int(entry_id) if entry_id else None)


def _outcome(change, done: str):
    """Run a user change; the status line and a cleared password box (or the error, password kept)."""
    try:
        change()
    except InputError as err:
        return escape_markup(str(err)), gr.skip()
    return escape_markup(done), ""


def _pick_user(evt: gr.SelectData):
    return evt.row_value[0], evt.row_value[1]
