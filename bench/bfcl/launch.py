"""BFCL's own CLI with one extra model entry: runs INSIDE .venv-bfcl, never imported by .venv.

`.venv-bfcl/bin/python bench/bfcl/launch.py generate|evaluate ARGS...` is `bfcl ARGS...`
with a `ModelConfig` for the bench's model added to BFCL's `MODEL_CONFIG_MAPPING` at run
time (BFCL's own extension point: the CLI and the checker look models up there). Its
handler is BFCL's `OpenAICompletionsHandler` (chat completions, function calling, the same
class as BFCL's `openbmb/MiniCPM-SALA-FC` entry) with one addition: each request carries
`x-reflexguard-session: <BFCL case id>`, so reflexguard's events join to BFCL's cases.
The request body, the parsing and the checker are BFCL's, unchanged.

Environment: BFCL_BENCH_MODEL (the model id sent upstream), OPENAI_BASE_URL (reflexguard),
OPENAI_API_KEY, BFCL_PROJECT_ROOT (one per cell and arm). Only stdlib and bfcl_eval here.

`launch.py requests CATEGORY ID...` sends nothing: it prints, one JSON line per case, the
messages and tools of the first request BFCL's handler would send for that case (its own
`_pre_query_processing_FC`, `_compile_tools` and `add_first_turn_message_FC`), with the
case's ground truth, names as the tools spell them. The margins study asks the model those
exact requests (bench/margins/bfcl_decisions.py).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

REGISTRY_NAME = "reflexguard-bench-FC"
SESSION_HEADER = "x-reflexguard-session"


def register(model: str) -> None:
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
    from bfcl_eval.model_handler.api_inference.openai_completion import (
        OpenAICompletionsHandler,
    )

    case = threading.local()  # BFCL runs cases in a thread pool: one case per thread

    class SessionTaggedHandler(OpenAICompletionsHandler):  # type: ignore[misc]
        def inference(self, test_entry: dict[str, Any], include_input_log: bool,
                      exclude_state_log: bool) -> Any:
            case.id = test_entry["id"]
            return super().inference(test_entry, include_input_log, exclude_state_log)

        def generate_with_backoff(self, **kwargs: Any) -> Any:
            headers = {SESSION_HEADER: getattr(case, "id", "unknown")}
            return super().generate_with_backoff(extra_headers=headers, **kwargs)

    # Mutated in place: the CLI and the checker hold references to this same dict.
    MODEL_CONFIG_MAPPING[REGISTRY_NAME] = ModelConfig(
        model_name=model, display_name=f"{model} through reflexguard (FC)",
        url="https://github.com/reflexguard", org="reflexguard bench", license="n/a",
        model_handler=SessionTaggedHandler, input_price=None, output_price=None,
        is_fc_model=True,
        # OpenAI-style function names allow no '.': BFCL renames them and its checker
        # maps them back, as for its own OpenAI-compatible FC entries.
        underscore_to_dot=True)


def dump_requests(category: str, ids: list[str]) -> None:
    import json
    import re

    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    os.environ.setdefault("OPENAI_API_KEY", "unused")  # the handler builds a client; no call
    config = MODEL_CONFIG_MAPPING[REGISTRY_NAME]
    handler = config.model_handler(model_name=config.model_name, temperature=0,
                                   registry_name=REGISTRY_NAME, is_fc_model=True)
    wanted = set(ids)
    truth = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
    for entry in load_dataset_entry(category):
        if entry["id"] not in wanted:
            continue
        data = handler._pre_query_processing_FC({}, entry)
        data = handler._compile_tools(data, entry)
        data = handler.add_first_turn_message_FC(data, entry["question"][0])
        # The tools spell a dotted name with "_" (convert_to_tool, as underscore_to_dot).
        gold = [{re.sub(r"\.", "_", name): args for name, args in call.items()}
                for call in truth.get(entry["id"], [])]
        print(json.dumps({"id": entry["id"], "messages": data["message"],
                          "tools": data["tools"], "ground_truth": gold}))


def main() -> None:
    register(os.environ.get("BFCL_BENCH_MODEL", "embedded"))
    if sys.argv[1:2] == ["requests"]:
        dump_requests(sys.argv[2], sys.argv[3:])
        return
    from bfcl_eval.__main__ import cli

    sys.argv = ["bfcl", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()
