"""Teacher-forced decisions from tau2's gold trajectories, with tau2's real environment.

For each task, each gold action becomes one decision: the conversation the bench's agent
would have sent just before that action, given that every earlier gold call was made
and answered by a fresh environment of the task. No model is called here.

The conversation is built as the bench builds it: tau2's own agents give the system
prompt and tools (`LLMAgent`; telecom runs in solo mode, `LLMSoloAgent`, whose tools
include the user's and `done`), tau2's orchestrator opens non-solo episodes with its
greeting and our scripted user answers it, and tau2's `to_litellm_messages` turns the
messages into the OpenAI format the model server receives.
"""

from __future__ import annotations

from collections.abc import Iterator
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from tau2.agent.llm_agent import LLMAgent, LLMSoloAgent, is_valid_agent_history_message
from tau2.data_model.message import AssistantMessage, Message, ToolCall, UserMessage
from tau2.data_model.tasks import Action, Task
from tau2.environment.environment import Environment
from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
from tau2.registry import registry
from tau2.run import load_tasks
from tau2.utils.llm_utils import to_litellm_messages

from bench.tau2.scripted_user import facts_of

SOLO_DOMAINS = frozenset({"telecom"})


@dataclass(frozen=True)
class Decision:
    """One next-call decision: the request the agent would send, and the gold answer."""

    domain: str
    task_id: str
    step: int  # index in the task's gold action list
    gold_name: str
    gold_arguments: dict[str, Any]
    requestor: str  # the gold action's requestor: "user" actions are the agent's in solo mode
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.domain, self.task_id, self.step)


@dataclass
class TaskDecisions:
    task_id: str
    decisions: list[Decision] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (step, reason)
    gold_errors: int = 0  # gold calls the environment answered with an error


def select_tasks(domain: str, count: int | None) -> list[Task]:
    tasks: list[Task] = load_tasks(domain)
    if domain in SOLO_DOMAINS:  # as the bench: only tasks tau2 accepts for solo mode
        tasks = [t for t in tasks if LLMSoloAgent.check_valid_task(t)]
    return tasks[:count] if count else tasks


def _environment(domain: str, task: Task) -> Environment:
    make_env = registry.get_env_constructor(domain)
    environment: Environment = make_env(solo_mode=True) if domain in SOLO_DOMAINS else make_env()
    state = task.initial_state
    history = deepcopy(state.message_history or []) if state is not None else []
    environment.set_state(
        initialization_data=state.initialization_data if state is not None else None,
        initialization_actions=state.initialization_actions if state is not None else None,
        message_history=history)
    return environment


def _agent(domain: str, task: Task, environment: Environment) -> LLMAgent | LLMSoloAgent:
    if domain in SOLO_DOMAINS:
        user_tools = environment.get_user_tools() if environment.user_tools else []
        return LLMSoloAgent(tools=environment.get_tools() + user_tools,
                            domain_policy=environment.get_policy(), task=task)
    return LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy())


def _opening(domain: str, task: Task) -> list[Message]:
    """The messages before the first gold call, as the orchestrator would have them."""
    if domain in SOLO_DOMAINS:
        return []  # solo mode: the agent works from the ticket in its system prompt
    state = task.initial_state
    history = [m for m in deepcopy(state.message_history or []) if
               is_valid_agent_history_message(m)] if state is not None else []
    opening, _ = facts_of(task)
    first = history or [deepcopy(DEFAULT_FIRST_AGENT_MESSAGE)]
    return [*first, UserMessage(role="user", content=opening)]


def _skip_reason(action: Action, tool_names: set[str]) -> str | None:
    if action.name not in tool_names:
        return f"not an agent tool ({action.requestor}-side {action.name})"
    return None


def task_decisions(domain: str, task: Task) -> TaskDecisions:
    """Every gold step of one task as a decision, executing the gold calls in order."""
    environment = _environment(domain, task)
    agent = _agent(domain, task, environment)
    tool_names = {t.name for t in agent.tools}
    tools = [t.openai_schema for t in agent.tools]
    tool_choice = "required" if domain in SOLO_DOMAINS else "auto"
    system = agent.get_init_state().system_messages
    history: list[Message] = _opening(domain, task)
    out = TaskDecisions(task.id)
    actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
    for step, action in enumerate(actions or []):
        reason = _skip_reason(action, tool_names)
        if reason is not None:
            out.skipped.append((step, reason))
            continue
        out.decisions.append(Decision(
            domain=domain, task_id=task.id, step=step, gold_name=action.name,
            gold_arguments=dict(action.arguments), requestor=action.requestor,
            messages=to_litellm_messages([*system, *history]), tools=tools,
            tool_choice=tool_choice))
        call = ToolCall(id=f"call_{step}", name=action.name, arguments=dict(action.arguments),
                        requestor="assistant")
        answer = environment.get_response(call)
        out.gold_errors += int(bool(answer.error))
        history.extend([AssistantMessage(role="assistant", content=None, tool_calls=[call]),
                        answer])
    return out


def domain_decisions(domain: str, count: int | None) -> Iterator[TaskDecisions]:
    for task in select_tasks(domain, count):
        yield task_decisions(domain, task)
