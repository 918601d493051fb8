"""`python -m bench.margins.speed GGUF [GGUF ...]`: prompt and generation tok/s per model.

Several models in one process, one after another, so their figures share the machine's
load at that moment and their ratio means something on a shared machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

PROMPT = "Customer support log: the user asked about order #W2378156 and a refund. " * 40
PROMPT_TOKENS = 300
GENERATED = 32


def measure(path: Path, threads: int) -> str:
    import llama_cpp

    started = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    load = time.perf_counter() - started
    tokens = llm.tokenize(PROMPT.encode())[:PROMPT_TOKENS]
    started = time.perf_counter()
    llm.eval(tokens)
    prompt = time.perf_counter() - started
    started = time.perf_counter()
    count = 0
    for _ in llm.generate(tokens, temp=0.0):
        count += 1
        if count >= GENERATED:
            break
    generation = time.perf_counter() - started
    llm.close()
    return (f"{path.name}: load {load:.1f} s, prompt {len(tokens) / prompt:.1f} tok/s "
            f"({len(tokens)} tokens), generation {count / generation:.1f} tok/s ({count} "
            f"tokens, greedy), {threads} thread(s)")


def main(argv: list[str] | None = None) -> None:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        print("bench.margins.speed: error: give GGUF files that exist"
              + (f" (missing: {', '.join(missing)})" if missing else ""), file=sys.stderr)
        sys.exit(2)
    for path in paths:
        print(measure(path, threads=1), flush=True)


if __name__ == "__main__":
    main()
