"""Admin tab: the knowledge base of help articles: list, add, edit, delete."""

import gradio as gr

from chatbot import AdminService, InputError

from .auth import PRIVATE, StaffLogin, shows_refusals
from .format import escape_markup
from .widgets import confirmed_delete, hidden_button, utc_time

ARTICLE_COLUMNS = ["id", "title", "updated (UTC)"]


class ArticleEditor:
    def __init__(self, admin: AdminService, login: StaffLogin) -> None:
        self.admin, self.login = admin, login

    def build(self) -> gr.Dataframe:
        """Lay out and wire the tab; returns the table so the page can fill it on load."""
        gr.Markdown("Help articles are given to the model in the prompt when they match a question.")
        table = gr.Dataframe(headers=ARTICLE_COLUMNS, interactive=False, elem_id="article-table")
        article_id = gr.Textbox(label="Article id (letters, digits and dashes)", elem_id="article-id")
        title = gr.Textbox(label="Title", elem_id="article-title")
        body = gr.Textbox(label="Body", lines=10, elem_id="article-body")
        status = gr.Markdown()
        with gr.Row():
            new = gr.Button("New article")
            save = gr.Button("Save article", variant="primary")
            confirm = confirmed_delete("Delete article")
        fields = [article_id, title, body]
        refresh = gr.Button("Refresh list", size="sm")
        refresh.click(self.list_articles, None, [table], api_name="list_articles")
        table.select(self.open_article, None, [*fields, status], **PRIVATE)
        new.click(_blank, None, [*fields, status], **PRIVATE)
        save.click(self.save_article, fields, [status], api_name="save_article").then(
            self.list_articles, None, [table], **PRIVATE
        )
        confirm.click(self.delete_article, [article_id], [status, confirm], api_name="delete_article").then(
            self.list_articles, None, [table], **PRIVATE
        )
        return table

    @shows_refusals
    def list_articles(self, request: gr.Request) -> list[list]:
        user = self.login.require(request)
        return [[a.id, a.title, utc_time(a.updated_at)] for a in self.admin.list_articles(user)]

    @shows_refusals
    def open_article(self, evt: gr.SelectData, request: gr.Request):
        user = self.login.require(request)
        article = self.admin.get_article(user, str(evt.row_value[0]))
        if article is None:
            return "", "", "", "That article was deleted meanwhile."
        return article.id, article.title, article.body, f"Editing article **{escape_markup(article.id)}**."

    @shows_refusals
    def save_article(self, article_id: str, title: str, body: str, request: gr.Request) -> str:
        """Create or replace the article; it is re-embedded, so matching questions find it at once."""
        user = self.login.require(request)
        try:
            article = self.admin.save_article(user, article_id, title, body)
        except InputError as err:
            return str(err)
        return f"Saved article **{escape_markup(article.id)}**."

    @shows_refusals
    def delete_article(self, article_id: str, request: gr.Request):
        user = self.login.require(request)
        deleted = self.admin.delete_article(user, article_id)
        status = f"Deleted article **{escape_markup(article_id)}**." if deleted else "No such article."
        return status, hidden_button()


def _blank():
    return "", "", "", "New article: fill in id, title and body, then save."
