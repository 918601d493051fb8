"""One tau2 episode through tau2's real orchestrator and evaluator, kept as a record.

This mirrors `tau2.run.run_task` (same environment, agent, user and orchestrator
construction) so that a crash mid-episode still leaves the partial trajectory: such an
episode is recorded as an infrastructure error and a failure, never dropped. An episode
that outlives its wall-clock limit is recorded the same way under its own termination
reason, `episode_timeout`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from tau2.agent.llm_agent import LLMAgent, LLMSoloAgent
from tau2.data_model.message import AssistantMessage, ToolMessage
from tau2.data_model.tasks import RewardType, Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.orchestrator.orchestrator import Orchestrator
from tau2.registry import registry
from tau2.user.user_simulator import DummyUser, UserSimulator

from bench.event_tally import tally
from bench.fault_tally import injected_tally, mark_injected
from bench.records import Arm, Cell, EpisodeRecord, ProxyRecord, ToolCallRecord
from bench.tau2.classify import env_channel
from bench.tau2.scripted_user import LABEL as SCRIPTED_LABEL
from bench.tau2.scripted_user import ScriptedUser
from bench.tau2.sim_agent import SimulatedAgent
from reflexguard.core.limits import LABEL_LIMIT
from reflexguard.ops.events import Event

AgentKind = Literal["llm", "simulated"]
UserKind = Literal["scripted", "llm", "solo"]
MAX_STEPS = 60
EPISODE_TIMEOUT = "episode_timeout"  # our termination reason; tau2 has no wall clock
CONTENT_KEPT = 300
JUDGE_NOTE = ("none: natural-language assertions are not evaluated (tau2's judge is a "
              "hosted model); tasks checked only by them are flagged unscored")


@dataclass
class EpisodeSpec:
    cell: Cell
    arm: Arm
    task: Task
    trial: int
    seed: int
    max_errors: int = 10
    agent: AgentKind = "llm"
    user: UserKind = "scripted"
    llm: str | None = None  # litellm model string for the agent, e.g. "openai/embedded"
    llm_args: dict[str, Any] = field(default_factory=dict)
    user_llm: str | None = None
    user_llm_args: dict[str, Any] = field(default_factory=dict)
    inject: list[str] = field(default_factory=list)  # simulated agent only
    timeout: float | None = None  # wall-clock seconds for the whole episode; None = no limit

    @property
    def session(self) -> str:
        return session_key(self.cell.key, self.arm, str(self.task.id), self.trial)


def session_key(cell_key: str, arm: str, task_id: str, trial: int) -> str:
    """The episode's `x-reflexguard-session`, by which its events are joined to it.

    reflexguard clips a session to LABEL_LIMIT characters (it reaches labels and logs), and a
    clipped key joins no events. An injected-faults cell's key holds its whole spec, so a
    key that would be clipped names the cell by a digest instead; a short one stays readable
    (and the same as in the records already written, so `--resume` still joins them).
    """
    full = f"{cell_key}|{arm}|{task_id}|{trial}"
    if len(full) <= LABEL_LIMIT:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    tail = f"|{arm}|{trial}"
    room = LABEL_LIMIT - len(digest) - len(tail) - 1
    return f"{digest}|{task_id[:max(room, 0)]}{tail}"[:LABEL_LIMIT]


class EpisodeTimeout(Exception):
    """The episode's wall-clock limit passed before the next agent or user turn."""


def enforce_deadline(actor: Any, deadline: float, limit: float) -> None:
    """Bound an agent's or user's turns by the episode's deadline, without killing threads.

    A turn that would start after the deadline raises EpisodeTimeout instead; an LLM turn
    gets the time left as its litellm `timeout`, so one slow call cannot overrun by more
    than about a second. tau2 deep-copies `llm_args` per agent, so this is per episode.
    """
    generate = actor.generate_next_message
    llm_args = getattr(actor, "llm_args", None)
    cap = llm_args.get("timeout") if isinstance(llm_args, dict) else None

    def bounded(message: Any, state: Any) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EpisodeTimeout(f"the episode's wall-clock limit of {limit:g} s passed")
        if isinstance(llm_args, dict):
            llm_args["timeout"] = max(1.0, min(float(cap), left) if cap else left)
        return generate(message, state)

    actor.generate_next_message = bounded


def is_unscored(task: Task) -> bool:
    """True when nothing but natural-language assertions checks the agent's work."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return True
    return not (criteria.actions or criteria.env_assertions or criteria.communicate_info)


def _without_nl(task: Task) -> Task:
    criteria = task.evaluation_criteria
    if criteria is None or not criteria.reward_basis:
        return task
    basis = [b for b in criteria.reward_basis if b != RewardType.NL_ASSERTION]
    return task.model_copy(update={"evaluation_criteria": criteria.model_copy(
        update={"reward_basis": basis})})


def _build(spec: EpisodeSpec) -> tuple[Orchestrator, bool, frozenset[str], str]:
    domain = spec.cell.domain
    make_env = registry.get_env_constructor(domain)
    solo = spec.user == "solo"
    environment = make_env(solo_mode=True) if solo else make_env()
    # tau2 raises ValueError only when a domain has no user tools; the guard above it
    # already covers that, so nothing else is caught here.
    user_tools = environment.get_user_tools() if environment.user_tools else []
    user_tool_names = frozenset(t.name for t in user_tools) if not solo else frozenset()
    agent: Any
    if spec.agent == "simulated":
        agent = SimulatedAgent(environment.get_tools(), environment.get_policy(), spec.task,
                               spec.inject)
    elif solo:
        agent = LLMSoloAgent(tools=environment.get_tools() + user_tools,
                             domain_policy=environment.get_policy(), llm=spec.llm,
                             llm_args=spec.llm_args, task=spec.task)
    else:
        agent = LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(),
                         llm=spec.llm, llm_args=spec.llm_args)
    user: Any
    if solo:
        user = DummyUser(tools=None, instructions=str(spec.task.user_scenario), llm=None)
        user_label = "none (telecom solo mode: the agent works from the ticket)"
    elif spec.user == "llm":
        user = UserSimulator(tools=user_tools or None, instructions=str(spec.task.user_scenario),
                             llm=spec.user_llm, llm_args=spec.user_llm_args)
        user_label = f"tau2 LLM user simulator ({spec.user_llm})"
    else:
        user = ScriptedUser(spec.task)
        user_label = SCRIPTED_LABEL
    orchestrator = Orchestrator(domain=domain, agent=agent, user=user, environment=environment,
                                task=spec.task, max_steps=MAX_STEPS,
                                max_errors=spec.max_errors, seed=spec.seed, solo_mode=solo)
    return orchestrator, solo, user_tool_names, user_label


def tool_calls_of(messages: list[Any], user_tool_names: frozenset[str]) -> tuple[
        list[ToolCallRecord], int]:
    """Every call with the environment's answer (joined by position), and the agent turns."""
    calls: list[ToolCallRecord] = []
    turns = -1
    pending: list[tuple[int, str, str]] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            turns += 1
            pending = [(turns, c.name, "assistant") for c in message.tool_calls or []]
        elif getattr(message, "role", None) == "user" and getattr(message, "tool_calls", None):
            pending = [(-1, c.name, "user") for c in message.tool_calls]
        elif isinstance(message, ToolMessage) and pending:
            turn, name, _ = pending.pop(0)
            content = str(message.content or "")
            channel = env_channel(content, name, user_tool_names) if message.error else None
            calls.append(ToolCallRecord(turn=turn, name=name, error=bool(message.error),
                                        channel=channel, content=content[:CONTENT_KEPT]))
    return calls, turns + 1


def proxy_record(events: list[Event]) -> ProxyRecord:
    seen = tally(events)
    return ProxyRecord(first_attempt_channels=dict(seen.first),
                       unknown_tool_names=dict(seen.names),
                       repairs_attempted=seen.attempted, repairs_succeeded=seen.succeeded,
                       extra_upstream_calls=seen.extra, outcomes=dict(seen.outcomes),
                       injected=injected_tally(events))


def run_episode(spec: EpisodeSpec,
                events_for: Callable[[str], list[Event]] | None = None) -> EpisodeRecord:
    started = time.perf_counter()
    orchestrator, solo, user_tool_names, user_label = _build(spec)
    deadline: float | None = None
    if spec.timeout:
        deadline = time.monotonic() + spec.timeout
        enforce_deadline(orchestrator.agent, deadline, spec.timeout)
        enforce_deadline(orchestrator.user, deadline, spec.timeout)
    infrastructure_error: str | None = None
    simulation = None
    note = ""
    try:
        simulation = orchestrator.run()
        messages = simulation.messages
        reason = simulation.termination_reason
        termination = str(getattr(reason, "value", reason))
    except Exception as exc:  # an episode that crashes is a failure, never a dropped run
        messages = list(getattr(orchestrator, "trajectory", []))
        # A call cut off by the time-left timeout raises litellm's error, not ours.
        if isinstance(exc, EpisodeTimeout) or (
                deadline is not None and time.monotonic() >= deadline - 1.0):
            termination = EPISODE_TIMEOUT
            note = f"{EPISODE_TIMEOUT}: {type(exc).__name__}: {str(exc)[:300]}"
        else:
            infrastructure_error = f"{type(exc).__name__}: {str(exc)[:500]}"
            termination = "infrastructure_error"
    reward = 0.0
    if simulation is not None:
        try:
            info = evaluate_simulation(simulation=simulation, task=_without_nl(spec.task),
                                       evaluation_type=EvaluationType.ALL, solo_mode=solo,
                                       domain=spec.cell.domain)
            reward = float(info.reward)
        except Exception as exc:  # e.g. "Task task_2 not found": reward 0, kept
            note = f"evaluation failed: {type(exc).__name__}: {str(exc)[:300]}"
    calls, turns = tool_calls_of(messages, user_tool_names)
    proxy = proxy_record(events_for(spec.session)) if events_for else ProxyRecord()
    if proxy.injected is not None and proxy.injected.passed_on:
        calls = mark_injected(calls, proxy.injected)
    tau2_result: dict[str, Any] = {"termination_reason": termination, "note": note}
    if simulation is not None:
        tau2_result["simulation"] = simulation.model_dump(mode="json")
    return EpisodeRecord(
        cell=spec.cell, arm=spec.arm, task_id=spec.task.id, trial=spec.trial, seed=spec.seed,
        max_errors=spec.max_errors,
        simulated=spec.agent == "simulated", unscored=is_unscored(spec.task),
        termination_reason=termination, reward=reward,
        infrastructure_error=infrastructure_error, agent_turns=turns, calls=calls,
        proxy=proxy,
        duration_s=time.perf_counter() - started, user=user_label, judge=JUDGE_NOTE,
        tau2=tau2_result,
    )
