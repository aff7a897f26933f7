"""The staff page at /admin: cache browser, knowledge base, dashboard, verify, import/export, staff, audit log.

Gradio's login guards every route of this app; each handler also checks the login, and the admin service
checks the user's role on every call, so a tab an agent can see does not mean an action an agent may take.
"""

import gradio as gr

from chatbot import AdminService

from .admin_articles import ArticleEditor
from .admin_cache import CacheBrowser
from .admin_dashboard import Dashboard
from .admin_staff import AuditLog, StaffManager
from .admin_tools import ReplyVerifier, Transfer
from .auth import PRIVATE, StaffLogin

PATH = "/admin"
DELETE_FILES_AFTER = (3600, 3600)  # exports and uploads leave Gradio's cache folder after an hour


def build_admin(admin: AdminService, login: StaffLogin) -> gr.Blocks:
    with gr.Blocks(title="Helpdesk admin", delete_cache=DELETE_FILES_AFTER) as blocks:
        with gr.Row():
            gr.Markdown("## Helpdesk admin")
            who = gr.Markdown(elem_id="who")
            gr.Button("Log out", link=f"{PATH}/logout", size="sm", scale=0)
        with gr.Tab("Cache", id="cache"):
            cache = CacheBrowser(admin, login)
            cache.build()
        with gr.Tab("Knowledge base", id="articles"):
            articles = ArticleEditor(admin, login)
            article_table = articles.build()
        with gr.Tab("Dashboard", id="dashboard") as dashboard_tab:
            dashboard = Dashboard(admin, login)
            dashboard_outputs = dashboard.build()
        with gr.Tab("Verify", id="verify") as verify_tab:
            verifier = ReplyVerifier(admin, login)
            reply_table = verifier.build()
        with gr.Tab("Import / export", id="transfer"):
            Transfer(admin, login).build()
        with gr.Tab("Staff", id="staff") as staff_tab:
            staff = StaffManager(admin, login)
            user_table = staff.build()
        with gr.Tab("Audit log", id="audit") as audit_tab:
            audit = AuditLog(admin, login)
            audit_table = audit.build()
        blocks.load(_who(admin, login), None, [who], **PRIVATE)
        blocks.load(cache.list_page, [*cache.query, cache.page, gr.State(0)], cache.table_outputs, **PRIVATE)
        blocks.load(articles.list_articles, None, [article_table], **PRIVATE)
        dashboard_tab.select(dashboard.refresh, None, dashboard_outputs, **PRIVATE)
        verify_tab.select(verifier.recent, [verifier.only_unanswered], [reply_table], **PRIVATE)
        staff_tab.select(staff.list_users, None, [user_table], **PRIVATE)
        audit_tab.select(audit.rows, audit.filters, [audit_table], **PRIVATE)
    return blocks


def _who(admin: AdminService, login: StaffLogin):
    def who(request: gr.Request) -> str:
        account = admin.account(login.require(request))
        return f"Logged in as **{account.name}** ({account.role})" if account else "Not logged in"

    return who
