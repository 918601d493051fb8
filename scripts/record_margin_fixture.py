"""One-off: record real chat completions with logprobs from the embedded model.

Writes tests/core/fixtures/qwen05b_q4km_logprobs.json. It loads the GGUF with
llama-cpp-python directly (the embedded server's own library and chat template), because
logprobs come back only when the model was created with `logits_all=True`, and that
keeps an n_ctx x n_vocab score buffer: n_ctx=2048 keeps it to about 1.2 GB.

    .venv/bin/python scripts/record_margin_fixture.py
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from llama_cpp import Llama

MODEL = Path.home() / ".cache/reflexguard/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
OUT = Path(__file__).resolve().parents[1] / "tests/core/fixtures/qwen05b_q4km_logprobs.json"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_order_details", "description": "Look up an order by its id.",
        "parameters": {"type": "object", "required": ["order_id"],
                       "properties": {"order_id": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "cancel_pending_order", "description": "Cancel a pending order.",
        "parameters": {"type": "object", "required": ["order_id", "reason"],
                       "properties": {"order_id": {"type": "string"},
                                      "reason": {"type": "string",
                                                 "enum": ["no longer needed",
                                                          "ordered by mistake"]}}}}},
]

CASES = {
    "call": [{"role": "user", "content": "Cancel order #W123, I ordered it by mistake."}],
    "text": [{"role": "user", "content": "Say hello in one short sentence. Do not call tools."}],
    "unicode": [{"role": "user", "content":
                 "Réponds en une phrase en français avec un emoji 🎉, sans appeler d'outil."}],
    # No tools offered: a plain text reply, in a script whose characters span tokens.
    "unicode_no_tools": [{"role": "user", "content":
                          "Write 東京 and 🎉 three times, nothing else."}],
}


def main() -> int:
    llm = Llama(model_path=str(MODEL), n_ctx=2048, logits_all=True, verbose=False, seed=0)
    recorded = {}
    for name, messages in CASES.items():
        recorded[name] = llm.create_chat_completion(
            messages=messages, tools=None if name.endswith("no_tools") else TOOLS,
            temperature=0.0, max_tokens=96,
            logprobs=True, top_logprobs=5,
        )
    OUT.write_text(json.dumps({
        "note": ("Recorded (not simulated) from the embedded model "
                 f"{MODEL.name} with llama-cpp-python create_chat_completion("
                 "logprobs=True, top_logprobs=5, temperature=0), Llama(n_ctx=2048, "
                 f"logits_all=True), by scripts/record_margin_fixture.py on "
                 f"{datetime.now(UTC).isoformat(timespec='seconds')}. Calls are written in "
                 "content (the embedded model's format). llama-cpp-python sets `bytes` to "
                 "null and decodes partial UTF-8 tokens with errors='ignore'; its logprobs "
                 "are numpy float32, written here as JSON numbers."),
        "tools": TOOLS,
        "requests": CASES,
        "completions": recorded,
    }, ensure_ascii=False, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
