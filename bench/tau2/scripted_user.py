"""A deterministic scripted user for tau2 episodes without a real user LLM.

Written for reflexguard and labelled as such in every report: it is not tau2's LLM user
simulator. It opens with the task's reason for calling and the facts the user knows,
confirms when the agent asks to proceed, repeats its facts when asked a question, and
ends the conversation when the agent stops asking (or after a bounded number of turns).
"""

from __future__ import annotations

import re
from typing import Any

from tau2.data_model.message import UserMessage
from tau2.data_model.tasks import StructuredUserInstructions, Task
from tau2.user.base import STOP as TAU2_STOP
from tau2.user.base import BaseUser, UserState

STOP: str = str(TAU2_STOP)
LABEL = "scripted user (deterministic, written for reflexguard; not tau2's LLM user)"
MAX_TURNS = 8
MAX_REPEATS = 2
CONFIRM = re.compile(
    r"\b(confirm|proceed|shall i|should i|would you like|do you want|go ahead|"
    r"is (this|that) (correct|right|ok)|yes or no)\b", re.IGNORECASE)
FIRST_PERSON = [(r"\bYou are\b", "I am"), (r"\byou are\b", "I am"), (r"\bYou're\b", "I'm"),
                (r"\byou'd\b", "I'd"), (r"\bYou\b", "I"), (r"\byou\b", "I"),
                (r"\byour\b", "my"), (r"\bYour\b", "My"), (r"\byourself\b", "myself")]


def first_person(text: str) -> str:
    for pattern, replacement in FIRST_PERSON:
        text = re.sub(pattern, replacement, text)
    return text


def facts_of(task: Task) -> tuple[str, str]:
    """(opening line, known facts) from the task's user scenario."""
    instructions = task.user_scenario.instructions
    if isinstance(instructions, StructuredUserInstructions):
        known = first_person(str(instructions.known_info or ""))
        opening = first_person(str(instructions.reason_for_call))
        return f"Hi. {opening} {known}".strip(), known or opening
    text = first_person(str(instructions))
    return f"Hi. {text}", text


class ScriptedUser(BaseUser):
    def __init__(self, task: Task, **_: Any) -> None:
        super().__init__(instructions=str(task.user_scenario), llm=None, llm_args=None)
        self.opening, self.known = facts_of(task)
        self.turns = 0
        self.repeats = 0

    def get_init_state(self, message_history: list[Any] | None = None) -> UserState:
        return UserState(system_messages=[], messages=list(message_history or []))

    def set_seed(self, seed: int) -> None:
        pass  # deterministic already

    @classmethod
    def is_stop(cls, message: UserMessage) -> bool:
        return bool(message.content) and STOP in (message.content or "")

    def reply_to(self, text: str) -> str:
        """The scripted answer to one agent message."""
        self.turns += 1
        if self.turns == 1:
            return self.opening
        if self.turns > MAX_TURNS:
            return STOP
        if CONFIRM.search(text):
            return "Yes, please go ahead."
        if "?" in text and self.repeats < MAX_REPEATS:
            self.repeats += 1
            return f"Here is what I know: {self.known}"
        return STOP

    def generate_next_message(self, message: Any, state: UserState) -> tuple[UserMessage,
                                                                             UserState]:
        text = getattr(message, "content", None) or ""
        reply = UserMessage(role="user", content=self.reply_to(text))
        state.messages.append(message)
        state.messages.append(reply)
        return reply, state
