"""`on_exhausted: error` through a real LiteLLM proxy: the client gets LiteLLM's error."""

from __future__ import annotations

import openai
import pytest

from tests.api.test_openai_guard import GOOD, _request
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.integrations import proxies

pytestmark = pytest.mark.litellm_proxy


def test_exhausted_ladder_becomes_an_error_response() -> None:
    # The guardrail with max_repairs=1 and on_exhausted=error, its own fake upstream;
    # started when collection ended (tests/integrations/proxies.py).
    started = proxies.gateway("exhausted")
    fake, url = started.fake, started.url()
    fake.default = Scripted(completion=tool_call_completion("get_order", GOOD))
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", **_request())
    assert fake.calls == 2
    assert "no valid tool call in 2 attempts" in str(caught.value)
    assert caught.value.status_code == 500  # LiteLLM's answer to a raising post_call hook
