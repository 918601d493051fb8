"""litellm fetches its model cost map from the network on import unless told not to.

The LiteLLM proxies these tests need start when collection ends (tests/integrations/
proxies.py), beside the tests before them, and stop when the session ends."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from tests.integrations import proxies

# Which proxy each module's litellm_proxy tests use.
USES = {"test_litellm_guardrail.py": "docs", "test_litellm_guardrail_exhausted.py": "exhausted"}


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    wanted = {USES[item.path.name] for item in session.items
              if item.path.name in USES and item.get_closest_marker("litellm_proxy")}
    for name in sorted(wanted):
        proxies.gateway(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    proxies.stop_all()
