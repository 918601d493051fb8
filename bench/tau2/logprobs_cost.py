"""`python -m bench.tau2.logprobs_cost`: what `margins: on` costs an embedded model server.

The same chat request, with and without `logprobs`, against the embedded llama.cpp
server, alternating, in one run. Prints seconds per request; docs/bench.md explains why
the embedded bench runs use `--margins off`.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from typing import Any

from reflexguard.http.margins import TOP_LOGPROBS

PROMPT = "Count from 1 to 100, comma separated."


def ask(base_url: str, logprobs: bool, max_tokens: int) -> tuple[float, int]:
    """(seconds, completion tokens) of one non-streaming chat request."""
    body: dict[str, Any] = {"model": "embedded", "temperature": 0, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": PROMPT}]}
    if logprobs:  # what reflexguard adds with margins on
        body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    request = urllib.request.Request(f"{base_url}/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=1800) as response:
        answer = json.loads(response.read())
    return time.perf_counter() - started, int(answer["usage"]["completion_tokens"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", default="Q4_K_M")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from reflexguard.embedded.child import model_server

    with model_server(args.variant, n_ctx=2048, threads=args.threads) as server:
        ask(server.base_url, False, args.max_tokens)  # warm-up
        for round_ in range(args.rounds):
            for logprobs in (False, True):
                seconds, tokens = ask(server.base_url, logprobs, args.max_tokens)
                print(f"round {round_} logprobs={logprobs}: {seconds:.1f} s for {tokens} "
                      f"tokens")


if __name__ == "__main__":
    main()
