"""The OpenAI Agents SDK (openai-agents), Responses and Chat Completions models,
`Runner.run` and `Runner.run_streamed`, through the proxy and with the in-process guard."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.frameworks.conftest import (
    assert_repaired,
    get_weather,
    guarded_async,
)

agents = pytest.importorskip("agents")
pytestmark = pytest.mark.frameworks
agents.set_tracing_disabled(True)  # no trace export to the network

MODELS = ["responses", "chat"]


def _agent(client: Any, kind: str) -> Any:
    model = (agents.OpenAIResponsesModel(model="m", openai_client=client) if kind == "responses"
             else agents.OpenAIChatCompletionsModel(model="m", openai_client=client))
    return agents.Agent(name="weather", instructions="Answer with the tool.",
                        tools=[agents.function_tool(get_weather)], model=model)


async def _run(agent: Any, streamed: bool) -> str:
    if not streamed:
        result = await agents.Runner.run(agent, "Weather in Paris?")
        return str(result.final_output)
    run = agents.Runner.run_streamed(agent, "Weather in Paris?")
    async for _ in run.stream_events():
        pass
    return str(run.final_output)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", MODELS)
async def test_through_the_proxy(via_proxy: Any, kind: str, streamed: bool) -> None:
    fake, url = via_proxy
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
    assert_repaired(fake, await _run(_agent(client, kind), streamed), streamed)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", MODELS)
async def test_in_process(scripted: Any, kind: str, streamed: bool) -> None:
    fake, url = scripted
    assert_repaired(fake, await _run(_agent(guarded_async(url), kind), streamed), streamed)
