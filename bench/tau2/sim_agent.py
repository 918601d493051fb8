"""A simulated agent for tests: it replays a task's gold actions and injects known errors.

Everything it produces is marked `simulated` in the records and the report. It calls no
model: it exists so that tests can assert exact success-vs-budget curves through tau2's
real orchestrator and evaluator (e.g. 3 injected errors give success 0 at K <= 3 and 1
at K >= 4).
"""

from __future__ import annotations

import uuid
from typing import Any

from tau2.agent.base import LocalAgent
from tau2.data_model.message import AssistantMessage, ToolCall
from tau2.data_model.tasks import Task
from tau2.environment.tool import Tool

# What each injectable channel sends to the environment.
INJECTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "unknown_tool": ("complete_task", {"task_id": "task_1"}),
    "argument_error": ("__gold__", {"no_such_argument": 1}),
}


class SimulatedState:
    def __init__(self) -> None:
        self.step = 0


class SimulatedAgent(LocalAgent[SimulatedState]):
    def __init__(self, tools: list[Tool], domain_policy: str, task: Task,
                 errors: list[str]) -> None:
        super().__init__(tools=tools, domain_policy=domain_policy)
        gold = [(a.name, dict(a.arguments)) for a in (task.evaluation_criteria.actions or [])
                if a.requestor == "assistant"] if task.evaluation_criteria else []
        self.plan: list[tuple[str, dict[str, Any]]] = []
        for channel in errors:
            name, arguments = INJECTIONS[channel]
            if name == "__gold__":
                name = gold[0][0] if gold else "transfer_to_human_agents"
            self.plan.append((name, arguments))
        self.plan.extend(gold)

    def get_init_state(self, message_history: list[Any] | None = None) -> SimulatedState:
        return SimulatedState()

    def set_seed(self, seed: int) -> None:
        pass

    def generate_next_message(self, message: Any, state: SimulatedState) -> tuple[
            AssistantMessage, SimulatedState]:
        if state.step < len(self.plan):
            name, arguments = self.plan[state.step]
            state.step += 1
            call = ToolCall(id=f"sim_{uuid.uuid4().hex[:8]}", name=name, arguments=arguments,
                            requestor="assistant")
            return AssistantMessage(role="assistant", content=None, tool_calls=[call]), state
        state.step += 1
        return AssistantMessage(role="assistant", content="All done. Goodbye."), state
