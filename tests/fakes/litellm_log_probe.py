"""A LiteLLM logging callback for the guardrail's tests: one JSON line per logged call, with
the tags and guardrail records LiteLLM's own logging saw. Loaded by the proxy process from
`litellm_settings.callbacks`; writes to $REFLEXGUARD_TEST_LITELLM_LOG."""

from __future__ import annotations

import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger


class LogProbe(CustomLogger):
    async def async_log_success_event(self, kwargs: dict[str, Any], response_obj: Any,
                                      start_time: Any, end_time: Any) -> None:
        record = kwargs.get("standard_logging_object") or {}
        line = {"tags": record.get("request_tags"),
                "guardrails": record.get("guardrail_information"),
                "model": record.get("model")}
        with open(os.environ["REFLEXGUARD_TEST_LITELLM_LOG"], "a") as out:
            out.write(json.dumps(line, default=str) + "\n")


probe = LogProbe()
