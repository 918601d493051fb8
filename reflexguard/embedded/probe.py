"""Run by `reflexguard model doctor` in a subprocess: `python -m reflexguard.embedded.probe`.

This is an I/O edge, and it is a separate process on purpose: a llama.cpp build with
instructions this CPU cannot run dies with SIGILL (on import, load or first decode), and
that must end this probe, not the doctor, which then names the signal. It prints one
JSON object as its last stdout line.

  probe info                      llama-cpp-python's version and llama_print_system_info()
  probe speed MODEL THREADS       load MODEL, then time a fixed prompt and greedy decoding
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

PROMPT_TOKENS = 300
GENERATED_TOKENS = 32
# Fixed text, so that every run and every machine times the same tokens.
PROMPT = (
    "You are a customer service agent for an online retail store. A customer writes: "
    "I ordered a pair of hiking boots and a blue backpack last week, order number W2378156, "
    "and the boots arrived in the wrong size. I would like to exchange them for size 10 "
    "and keep the backpack. Please check the order status, confirm the item details, and "
    "tell me what the next steps are. The agent must look up the order, verify the "
    "customer's identity by email or name and zip code, list the items, and propose an "
    "exchange only for delivered items. "
)


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def info() -> int:
    try:
        import llama_cpp
    except ImportError as exc:
        _emit({"error": f"llama_cpp is not importable: {exc}"})
        return 3
    system = llama_cpp.llama_print_system_info()
    text = system.decode(errors="replace") if isinstance(system, bytes) else str(system)
    _emit({"version": getattr(llama_cpp, "__version__", "unknown"), "system_info": text})
    return 0


def speed(model: str, threads: int) -> int:
    import llama_cpp

    began = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    loaded = time.perf_counter()
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True)
    while len(tokens) < PROMPT_TOKENS:
        tokens += llm.tokenize(PROMPT.encode(), add_bos=False)
    tokens = tokens[:PROMPT_TOKENS]
    # Warm-up: the first evaluation pays one-off costs (thread pool start, page faults in
    # the weights) that no later request pays; the cache is then emptied (reset).
    llm.eval(tokens[-16:])
    llm.reset()  # type: ignore[no-untyped-call]
    generated: list[int] = []
    start = time.perf_counter()
    first = start
    # temp 0 is greedy: the same tokens every run. Evaluating past an end-of-text token is
    # harmless here, so exactly GENERATED_TOKENS are always timed.
    for token in llm.generate(tokens, temp=0.0, reset=True):
        generated.append(token)
        if len(generated) == 1:
            first = time.perf_counter()  # the prompt is evaluated, one token sampled
        if len(generated) == GENERATED_TOKENS:
            break
    end = time.perf_counter()
    _emit({
        "load_s": round(loaded - began, 3),
        "prompt_tokens": PROMPT_TOKENS,
        "prompt_tok_s": round(PROMPT_TOKENS / (first - start), 2),
        "generated_tokens": GENERATED_TOKENS,
        # the first token came with the prompt; the rest are one decode each
        "generation_tok_s": round((GENERATED_TOKENS - 1) / (end - first), 2),
        "threads": threads,
        "text": llm.detokenize(generated).decode(errors="replace")[:80],
    })
    return 0


def main(argv: list[str]) -> int:
    if argv[1:2] == ["info"]:
        return info()
    if argv[1:2] == ["speed"] and len(argv) == 4:
        return speed(argv[2], int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
