"""One-off: how far Q2_K moves the per-token margins of Q4_K_M's own tokens, and how often
it flips them, by Q4_K_M margin. The evidence behind the default `margin_threshold`
(docs/screen.md); the study (`python -m bench.margins`) measures the real calibration.

Q4_K_M generates greedily (temperature 0) for each prompt; its prompt + generated tokens
are then fed to Q2_K unchanged (teacher forcing) and both models' logits compared at
every generated position. Margins here are over the whole vocabulary (chosen logprob
minus the best other token's), which equals the top-5 margin the proxy computes.

    .venv/bin/python scripts/margin_shift.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from llama_cpp import Llama

MODELS = Path.home() / ".cache/reflexguard/models"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_margin_fixture import TOOLS  # noqa: E402

ASKS = [
    "Cancel order #W123, I ordered it by mistake.",
    "What is in order #W555?",
    "Please cancel #W900, no longer needed.",
    "Show me the details of my order W42.",
    "I want to cancel order 7781 because I don't need it anymore.",
    "Hi! How are you today?",
    "Can you look up order #A1B2C3 for me?",
    "Cancel my pending order #W31337, ordered by mistake, thanks.",
    "What's the status of order number 99?",
    "Tell me a joke about shipping.",
    "I'd like details for order #W2024 please.",
    "Stop order #W1 from shipping, I no longer need it.",
]
BINS = [(-np.inf, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, np.inf)]


def log_softmax(row: np.ndarray) -> np.ndarray:
    shifted = row - row.max()
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum())
    return result


def margin(logprobs: np.ndarray, token: int) -> float:
    others = np.delete(logprobs, token)
    return float(logprobs[token] - others.max())


def main() -> int:
    q4 = Llama(model_path=str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), n_ctx=2048,
               logits_all=True, verbose=False, seed=0)
    sequences = []
    for ask in ASKS:
        messages = [{"role": "user", "content": ask}]
        completion = q4.create_chat_completion(messages=messages, tools=TOOLS,
                                               temperature=0.0, max_tokens=64)
        # input_ids holds the prompt and every generated token that was fed back; the
        # last sampled token never is, and needs no logits of its own here.
        start = completion["usage"]["prompt_tokens"]
        total = q4.n_tokens
        tokens = [int(t) for t in q4.input_ids[:total]]
        scores = np.array(q4.scores[:total], dtype=np.float64)
        sequences.append((tokens, start, [
            margin(log_softmax(scores[p - 1]), tokens[p]) for p in range(start, total)]))
    del q4
    q2 = Llama(model_path=str(MODELS / "qwen2.5-coder-0.5b-instruct-q2_k.gguf"), n_ctx=2048,
               logits_all=True, verbose=False, seed=0)
    pairs = []
    for tokens, start, q4_margins in sequences:
        q2.reset()
        q2.eval(tokens)
        scores = np.array(q2.scores[:len(tokens)], dtype=np.float64)
        for offset, position in enumerate(range(start, len(tokens))):
            row = log_softmax(scores[position - 1])
            pairs.append((q4_margins[offset], margin(row, tokens[position]),
                          int(row.argmax()) != tokens[position]))
    shifts = np.array([abs(a - b) for a, b, _ in pairs])
    report = {
        "simulated": False, "prompts": len(ASKS), "tokens": len(pairs),
        "abs_margin_shift_quantiles": {q: round(float(np.quantile(shifts, q)), 3)
                                       for q in (0.5, 0.75, 0.9, 0.95, 0.99)},
        "q2_flips_by_q4_margin": [
            {"lo": None if lo == -np.inf else lo, "hi": None if hi == np.inf else hi,
             "tokens": sum(1 for a, _, _ in pairs if lo <= a < hi),
             "flips": sum(1 for a, _, f in pairs if lo <= a < hi and f)}
            for lo, hi in BINS],
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
