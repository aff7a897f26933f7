"""The public chat page: ask, watch the reply grow, see what was copied and how much faster it was.

The page holds only the shared service; each browser session's conversation lives in its own gr.State.
Only `/chat` is in the page's API; every UI event is private. Questions pass the shared `Admission` first:
a full line, or a client that already has its share of it, is refused at once and nothing is stored.
"""

from contextlib import closing
from dataclasses import dataclass

import gradio as gr

from chatbot import Admission, ChatBusy, ChatService, InputError, Reply

from . import format as fmt
from .auth import PRIVATE

INTRO = (
    "## Nimbus Drive help\n"
    "Ask about your account, storage, sharing or billing. Replies are decoded with LLMA: text is copied from "
    "similar past answers and help articles, and every copied token is checked against the model's own choice, "
    "so the reply is exactly what the engine's decoding rule (greedy, with repetition control and grounded "
    "numbers) gives one token at a time, only faster."
)
# Admission, not Gradio's queue, holds the line for the model (as many turns at once as the service decodes
# together, in order); Gradio runs a few more events than the line holds so that a question that must be
# refused is refused at once, not queued.
REFUSAL_WORKERS = 4


def user_bubble(text: str) -> dict:
    """A user message shown as typed: markup in it is escaped, never rendered."""
    return {"role": "user", "content": fmt.escape_markup(text)}


@dataclass
class ChatView:
    """The page's components, passed from the layout to the event wiring."""

    chatbot: gr.Chatbot
    textbox: gr.Textbox
    send: gr.Button
    stop: gr.Button
    show_details: gr.Checkbox
    details: gr.HTML
    reason: gr.Textbox
    send_reason: gr.Button
    feedback_note: gr.Markdown
    messages: gr.State  # what the chatbot shows: bubbles with stats lines
    turns: gr.State  # what the model sees: [{"role", "content"}] of completed turns
    replies: gr.State  # {bubble index: {"reply_id", "details"}} for feedback and the details panel
    pending: gr.State  # the message waiting in the queue
    rating: gr.State  # the last thumbs given, so a reason can follow it


class ChatPage:
    def __init__(self, service: ChatService, examples: list[str], admission: Admission) -> None:
        self.service = service
        self.examples = examples
        self.admission = admission
        workers = admission.limits.queue_size + REFUSAL_WORKERS
        self.model_queue = {"concurrency_limit": workers, "concurrency_id": "model"}
        self.max_queued = 4 * workers  # beyond this Gradio itself answers "queue is full"

    def build(self) -> gr.Blocks:
        with gr.Blocks(title="Nimbus Drive help") as blocks:
            gr.Markdown(INTRO)
            view = self._layout()
            self._wire_chat(view)
            self._wire_feedback(view)
            gr.api(self.chat, api_name="chat", **self.model_queue)
        blocks.queue(max_size=self.max_queued)
        return blocks

    # --- layout ------------------------------------------------------------------------------------

    def _layout(self) -> ChatView:
        chatbot = gr.Chatbot(
            label="Chat", height=460, sanitize_html=True, allow_tags=False, buttons=["copy", "copy_all"],
            placeholder="Ask a question, or pick an example below.", elem_id="chat",
        )
        with gr.Row():
            textbox = gr.Textbox(show_label=False, placeholder="Type your question…", scale=8, elem_id="question")
            send = gr.Button("Send", variant="primary", scale=1, elem_id="send")
            stop = gr.Button("Stop", variant="stop", scale=1, visible=False, elem_id="stop")
        reason, send_reason, feedback_note = self._feedback_layout()
        gr.Examples([[q] for q in self.examples], inputs=[textbox], label="Example questions", **PRIVATE)
        show_details = gr.Checkbox(label="Show copied spans and references", value=False, elem_id="show-details")
        details = gr.HTML(visible=False, elem_id="details")
        return ChatView(
            chatbot, textbox, send, stop, show_details, details, reason, send_reason, feedback_note,
            messages=gr.State([]), turns=gr.State([]), replies=gr.State({}), pending=gr.State(""),
            rating=gr.State(None),
        )

    @staticmethod
    def _feedback_layout() -> tuple[gr.Textbox, gr.Button, gr.Markdown]:
        with gr.Row():
            reason = gr.Textbox(
                show_label=False, scale=8, container=False, elem_id="feedback-reason",
                placeholder="Rate a reply with the thumbs under it; optionally tell us why here.",
            )
            send_reason = gr.Button("Send reason", scale=1, size="sm", elem_id="send-reason")
        return reason, send_reason, gr.Markdown(elem_id="feedback-note")

    # --- wiring ------------------------------------------------------------------------------------

    def _wire_chat(self, v: ChatView) -> None:
        locked = [v.textbox, v.send, v.stop]
        sent = gr.on(
            [v.textbox.submit, v.send.click], self.add_message, [v.textbox, v.messages],
            [*locked, v.chatbot, v.messages, v.pending], queue=False, **PRIVATE,
        )
        answering = sent.then(
            self.respond, [v.pending, v.messages, v.turns, v.replies],
            [v.chatbot, v.messages, v.turns, v.replies, v.details, v.textbox], show_progress_on=[v.chatbot],
            **self.model_queue, **PRIVATE,
        )
        answering.then(_unlock, None, locked, queue=False, **PRIVATE)  # runs after errors too
        v.stop.click(
            self.stop, [v.messages, v.replies], [v.chatbot, v.messages, *locked], cancels=[answering],
            queue=False, **PRIVATE,
        )
        v.show_details.change(_show_details, [v.show_details], [v.details], queue=False, **PRIVATE)
        v.chatbot.select(self.select_reply, [v.replies], [v.details], queue=False, **PRIVATE)
        v.chatbot.clear(_new_conversation, None, [v.messages, v.turns, v.replies, v.details], queue=False, **PRIVATE)

    def _wire_feedback(self, v: ChatView) -> None:
        v.chatbot.like(self.rate, [v.replies, v.reason], [v.rating, v.feedback_note], queue=False, **PRIVATE)
        v.send_reason.click(
            self.send_reason, [v.rating, v.reason], [v.reason, v.feedback_note], queue=False, **PRIVATE
        )

    # --- a chat turn -------------------------------------------------------------------------------

    def add_message(self, message: str, messages: list[dict]):
        """Show the question at once and lock the input while the answer waits in the queue."""
        messages = [*messages, user_bubble(message)]
        locked = gr.Textbox(value="", interactive=False), gr.Button(visible=False), gr.Button(visible=True)
        return *locked, messages, messages, message

    def respond(self, message: str, messages: list[dict], turns: list[dict], replies: dict, request: gr.Request):
        """Stream the reply into a new bubble; once done, keep the turn, its reply id and its details."""
        shown = messages
        try:
            with (
                self.admission.turn(_session(request), _address(request)),
                closing(self.service.stream(message, turns, session_id=_session(request))) as stream,
            ):
                for reply in stream:
                    shown = [*messages, _assistant_bubble(reply)]
                    yield shown, shown, gr.skip(), gr.skip(), gr.skip(), gr.skip()
        except (InputError, ChatBusy) as err:
            gr.Warning(str(err))
            before = messages[:-1]  # the rejected question leaves the chat and goes back into the textbox
            yield before, before, gr.skip(), gr.skip(), gr.skip(), message
            return
        details = self._details(reply)
        turns = [*turns, {"role": "user", "content": message}, {"role": "assistant", "content": reply.text}]
        replies = {**replies, str(len(shown) - 1): {"reply_id": reply.id, "details": details}}
        yield shown, shown, turns, replies, details, gr.skip()

    def stop(self, messages: list[dict], replies: dict):
        """Cancelling closes the service's stream, so a partial reply is never stored; say so in the chat."""
        if str(len(messages) - 1) in replies:  # the reply completed just before the click: nothing stopped
            return messages, messages, *_unlock()
        note = "<sub>Stopped: this reply was not saved and is not part of the conversation.</sub>"
        if messages and messages[-1]["role"] == "assistant":
            messages = [*messages[:-1], {"role": "assistant", "content": f"{messages[-1]['content']}\n\n{note}"}]
        else:
            messages = [*messages, {"role": "assistant", "content": note}]
        return messages, messages, *_unlock()

    def select_reply(self, replies: dict, evt: gr.SelectData) -> str | gr.HTML:
        """Clicking a reply shows its copied spans and references in the details panel."""
        chosen = replies.get(str(evt.index))
        return chosen["details"] if chosen else gr.HTML()

    def _details(self, reply: Reply) -> str:
        found = self.service.references(reply)
        references = fmt.references_html(reply.stats, found.entries, found.article)
        return fmt.details_html(reply.text, reply.spans, reply.stats, references)

    # --- feedback ----------------------------------------------------------------------------------

    def rate(self, replies: dict, reason: str, like: gr.LikeData):
        """Store a thumbs up or down with the reply it was given on (only this session's replies count).

        Clicking the chosen thumb again unselects it; Gradio then sends `liked=""` and the rating is removed.
        """
        chosen = replies.get(str(like.index if isinstance(like.index, int) else like.index[0]))
        if chosen is None or chosen["reply_id"] is None or like.liked not in (True, False, ""):
            return None, ""
        if like.liked == "":
            self.service.feedback(chosen["reply_id"], 0)
            return None, "Your rating was removed."
        value = 1 if like.liked else -1
        self.service.feedback(chosen["reply_id"], value, reason)
        return {"reply_id": chosen["reply_id"], "value": value}, "Thanks for the feedback."

    def send_reason(self, rating: dict | None, reason: str):
        if rating is None:
            return reason, "Rate a reply with a thumb up or down first, then send your reason."
        self.service.feedback(rating["reply_id"], rating["value"], reason)
        return "", "Thanks, your reason was saved with your rating."

    # --- the API -----------------------------------------------------------------------------------

    def chat(self, message: str, history: list[dict] | None = None, request: gr.Request = None) -> tuple[str, dict]:
        """Answer `message` given the earlier `history` ([{"role", "content"}]); returns (reply, stats)."""
        try:
            with self.admission.turn(_session(request), _address(request)):
                reply = self.service.ask(message, history or [], session_id=_session(request))
        except (InputError, ChatBusy) as err:
            raise gr.Error(str(err), print_exception=False) from err
        return reply.text, {**reply.stats.to_json(), "reply_id": reply.id, "notice": reply.notice}


def _assistant_bubble(reply: Reply) -> dict:
    if not reply.done:
        return {"role": "assistant", "content": fmt.escape_markup(reply.text) or "…"}
    return {"role": "assistant", "content": fmt.reply_markdown(reply.text, reply.stats, reply.notice)}


def _unlock() -> tuple:
    return gr.Textbox(interactive=True), gr.Button(visible=True), gr.Button(visible=False)


def _new_conversation() -> tuple:
    """The chat's clear button starts over: nothing earlier is sent to the model again."""
    return [], [], {}, ""


def _show_details(show: bool) -> gr.HTML:
    return gr.HTML(visible=show)


def _session(request: gr.Request | None) -> str:
    return (request.session_hash or "") if request is not None else ""


def _address(request: gr.Request | None) -> str:
    client = getattr(request, "client", None) if request is not None else None
    return getattr(client, "host", None) or ""
