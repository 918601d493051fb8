"""The decision builder against tau2's real tasks and environments (no model)."""

from __future__ import annotations

import json

from tau2.data_model.message import ToolCall
from tau2.data_model.tasks import Action
from tau2.registry import registry
from tau2.run import load_tasks

from bench.margins.decisions import select_tasks, task_decisions
from bench.tau2.scripted_user import facts_of


def _task(domain: str, task_id: str):  # type: ignore[no-untyped-def]
    return next(t for t in load_tasks(domain) if t.id == task_id)


def test_a_mock_task_asks_its_gold_call_after_greeting_and_scripted_opening() -> None:
    task = _task("mock", "create_task_1")
    built = task_decisions("mock", task)
    assert [d.gold_name for d in built.decisions] == ["create_task"]
    decision = built.decisions[0]
    roles = [m["role"] for m in decision.messages]
    assert roles == ["system", "assistant", "user"]
    assert "<policy>" in decision.messages[0]["content"]
    assert decision.messages[1]["content"] == "Hi! How can I help you today?"
    assert decision.messages[2]["content"] == facts_of(task)[0]
    offered = {t["function"]["name"] for t in decision.tools}
    assert "create_task" in offered and decision.tool_choice == "auto"
    assert built.skipped == [] and built.gold_errors == 0


def test_a_mock_history_task_starts_from_its_history_then_the_opening() -> None:
    built = task_decisions("mock", _task("mock", "update_task_with_message_history"))
    roles = [m["role"] for m in built.decisions[0].messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_later_steps_carry_earlier_gold_calls_with_the_real_environments_answers() -> None:
    task = select_tasks("retail", 1)[0]
    built = task_decisions("retail", task)
    assert task.evaluation_criteria is not None and task.evaluation_criteria.actions
    actions = task.evaluation_criteria.actions
    assert [d.step for d in built.decisions] == list(range(len(actions)))
    second = built.decisions[1].messages
    call, answer = second[-2], second[-1]
    assert call["tool_calls"][0]["function"]["name"] == actions[0].name
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == actions[0].arguments
    environment = registry.get_env_constructor("retail")()
    expected = environment.get_response(built_call(actions[0]))
    assert answer == {"role": "tool", "content": expected.content, "tool_call_id": "call_0"}
    assert len(built.decisions[-1].messages) == 3 + 2 * (len(actions) - 1)


def built_call(action: Action) -> ToolCall:
    return ToolCall(id="call_0", name=action.name, arguments=dict(action.arguments),
                    requestor="assistant")


def test_telecom_runs_solo_with_the_users_tools_and_a_required_call() -> None:
    built = task_decisions("telecom", select_tasks("telecom", 1)[0])
    decision = built.decisions[0]
    assert [m["role"] for m in decision.messages] == ["system"]
    assert "<ticket>" in decision.messages[0]["content"]
    offered = {t["function"]["name"] for t in decision.tools}
    assert {"done", "toggle_roaming"} <= offered and decision.tool_choice == "required"
    assert decision.requestor == "user"  # a user-side action, the solo agent's to make
