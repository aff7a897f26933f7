"""`python -m bench.service` with the `answer` layout replaced by one whose whole beginning the prefix cache holds.

    PYTHONPATH=. python docs/service/2026-12-03-cacheable-layouts/layouts.py twice|thrice [bench.service args]

"twice"/"thrice": the approved question and answer two or three times before the conversation (warmed at start
like every beginning), nothing after the customer's question. build_prompt and beginning_ids read these functions
from chatbot/prompt.py's module, so patching them there changes every prompt and warm-up.
"""

import sys

import bench.service as service
import chatbot.prompt as prompt

REPEATS = {"twice": 2, "thrice": 3}
kind = sys.argv[1]
original_head = prompt.head_messages


def head_messages(system_prompt, article, approved, layout):
    if layout != "answer" or not approved:
        return original_head(system_prompt, article, approved, layout)
    head = [{"role": "system", "content": prompt.system_message(system_prompt, article, ())}]
    return head + prompt.exchange(approved[0].question, approved[0].answer) * REPEATS[kind]


prompt.head_messages = head_messages
prompt.answered_before = lambda question, approved, layout: []
service.main(sys.argv[2:])
