"""pydantic-ai, its Chat Completions and Responses models, `run` and `run_stream`, through
the proxy and with the in-process guard (`OpenAIProvider(openai_client=...)`)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.frameworks.conftest import (
    assert_repaired,
    get_weather,
    guarded_async,
)

pydantic_ai = pytest.importorskip("pydantic_ai")
models = pytest.importorskip("pydantic_ai.models.openai")
providers = pytest.importorskip("pydantic_ai.providers.openai")
pytestmark = pytest.mark.frameworks


def _agent(client: Any, kind: str) -> Any:
    provider = providers.OpenAIProvider(openai_client=client)
    model = (models.OpenAIResponsesModel("m", provider=provider) if kind == "responses"
             else models.OpenAIChatModel("m", provider=provider))
    return pydantic_ai.Agent(model, tools=[get_weather], retries=0)


async def _run(agent: Any, streamed: bool) -> str:
    if not streamed:
        return str((await agent.run("Weather in Paris?")).output)
    async with agent.run_stream("Weather in Paris?") as run:
        return str(await run.get_output())


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
@pytest.mark.parametrize("kind", ["responses", "chat"])
async def test_through_the_proxy(via_proxy: Any, kind: str, streamed: bool) -> None:
    fake, url = via_proxy
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
    assert_repaired(fake, await _run(_agent(client, kind), streamed), streamed)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
@pytest.mark.parametrize("kind", ["responses", "chat"])
async def test_in_process(scripted: Any, kind: str, streamed: bool) -> None:
    fake, url = scripted
    assert_repaired(fake, await _run(_agent(guarded_async(url), kind), streamed), streamed)
