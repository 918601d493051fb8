"""LangGraph's agent (`langchain.agents.create_agent`, the current API; langgraph's
`create_react_agent` is deprecated) with `ChatOpenAI`, Chat Completions and
`use_responses_api=True`, invoke and stream, through the proxy and with the in-process
guard (ChatOpenAI takes a client as `async_client=` / `root_async_client=`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks.conftest import (
    assert_repaired,
    get_weather,
    guarded_async,
)

pytest.importorskip("langgraph")
langchain_agents = pytest.importorskip("langchain.agents")
langchain_openai = pytest.importorskip("langchain_openai")
pytestmark = pytest.mark.frameworks

QUESTION = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}


def _model(url: str, responses: bool, in_process: bool) -> Any:
    kwargs: dict[str, Any] = {"model": "m", "api_key": "sk-test", "max_retries": 0,
                              "use_responses_api": responses}
    if in_process:
        client = guarded_async(url)
        kwargs.update(async_client=client.chat.completions, root_async_client=client)
    else:
        kwargs["base_url"] = url
    return langchain_openai.ChatOpenAI(**kwargs)


async def _run(url: str, responses: bool, streamed: bool, in_process: bool) -> str:
    agent = langchain_agents.create_agent(_model(url, responses, in_process),
                                          tools=[get_weather])
    if not streamed:
        state = await agent.ainvoke(QUESTION)
        return str(state["messages"][-1].text)
    # stream_mode="messages" makes the model stream its tokens (ChatOpenAI._astream)
    text = []
    async for message, _meta in agent.astream(QUESTION, stream_mode="messages"):
        if getattr(message, "type", "") in ("AIMessageChunk", "ai"):
            text.append(message.text)
    return "".join(text)


CASES = [pytest.param(r, s, id=f"{'responses' if r else 'chat'}-{'stream' if s else 'invoke'}")
         for r in (False, True) for s in (False, True)]


@pytest.mark.parametrize(("responses", "streamed"), CASES)
async def test_through_the_proxy(via_proxy: Any, responses: bool, streamed: bool) -> None:
    fake, url = via_proxy
    assert_repaired(fake, await _run(url, responses, streamed, in_process=False), streamed)


@pytest.mark.parametrize(("responses", "streamed"), CASES)
async def test_in_process(scripted: Any, responses: bool, streamed: bool) -> None:
    fake, url = scripted
    assert_repaired(fake, await _run(url, responses, streamed, in_process=True), streamed)
