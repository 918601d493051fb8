"""`on_exhausted: error` through a real LiteLLM proxy: the client gets LiteLLM's error."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from bench.perf.litellm_proxy import litellm_proxy
from tests.api.test_openai_guard import GOOD, _request
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake

pytestmark = pytest.mark.litellm_proxy


def test_exhausted_ladder_becomes_an_error_response(tmp_path: Path) -> None:
    with threaded_fake() as (fake, upstream), litellm_proxy(
            upstream, tmp_path, max_repairs=1, on_exhausted="error") as url:
        fake.default = Scripted(completion=tool_call_completion("get_order", GOOD))
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", **_request())
    assert fake.calls == 2
    assert "no valid tool call in 2 attempts" in str(caught.value)
    assert caught.value.status_code == 500  # LiteLLM's answer to a raising post_call hook
