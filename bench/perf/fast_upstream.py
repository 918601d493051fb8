"""A fast fake upstream for the overhead benchmark: one fixed, valid tool-call answer.

Simulated, and labelled so (`system_fingerprint: "simulated"`). When the request asks for
`logprobs` (what `--margins on` adds), the answer carries a `logprobs.content` payload in
OpenAI's chat format, one entry per generated token with `top_logprobs` alternatives, so
the margins arm pays for reading and stripping a payload of realistic size.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import orjson
from aiohttp import web

from bench.perf.workload import ANSWER

_TOKEN = re.compile(r"\s*[A-Za-z]+|\d{1,3}|_|\s*[^\w\s]+|\s+")
_ALTERNATIVES = ("_", " ", '"', "order", "cancel", "get", ",", "mistake", "#", "W")


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def logprobs_for(text: str, top: int) -> dict[str, Any]:
    """OpenAI's `choices[].logprobs` for `text`: one entry per token (a word, up to three
    digits, or a run of punctuation: about what a BPE tokenizer makes of JSON), each with
    `top` alternatives, the chosen token first."""
    content = []
    for position, token in enumerate(_TOKEN.findall(text)):
        chosen = round(-0.001 - (position % 7) * 0.013, 4)
        alternatives = [_entry(token, chosen)] + [
            _entry(alt, round(chosen - 2.5 - rank * 1.7, 4)) for rank, alt in
            enumerate(a for a in _ALTERNATIVES if a != token)][: max(0, top - 1)]
        content.append({**_entry(token, chosen), "top_logprobs": alternatives[:top]})
    return {"content": content, "refusal": None}


def _generated_text(answer: dict[str, Any]) -> str:
    """What the model generated for the answer's call, as a template would render it."""
    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    return f'{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}'


ANSWER_BYTES = orjson.dumps(ANSWER)
_WITH_LOGPROBS: dict[int, bytes] = {}


def answer_with_logprobs(top: int) -> bytes:
    if top not in _WITH_LOGPROBS:
        choice = {**ANSWER["choices"][0],  # type: ignore[index]
                  "logprobs": logprobs_for(_generated_text(ANSWER), top)}
        _WITH_LOGPROBS[top] = orjson.dumps({**ANSWER, "choices": [choice]})
    return _WITH_LOGPROBS[top]


def wants_logprobs(raw: bytes) -> int | None:
    """`top_logprobs` (0 if unset) when the request asks for logprobs, else None."""
    if b'"logprobs"' not in raw:  # the common case stays a byte scan
        return None
    body = orjson.loads(raw)
    if body.get("logprobs") is not True:
        return None
    top = body.get("top_logprobs")
    return top if isinstance(top, int) and 0 <= top <= 20 else 0


async def answer(request: web.Request) -> web.Response:
    top = wants_logprobs(await request.read())
    body = ANSWER_BYTES if top is None else answer_with_logprobs(top)
    return web.Response(body=body, content_type="application/json")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--processes", type=int, default=1,
                        help="N copies on one port (SO_REUSEPORT): a many-core run's upstream "
                        "must not be its bottleneck (issue 23)")
    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    # The other dialects' native routes (bench.overhead --dialect), one fixed answer each.
    from bench.perf.dialect_workload import WORKLOADS

    for route, _, native in (WORKLOADS["messages"], WORKLOADS["responses"]):
        async def native_answer(request: web.Request, body: bytes = native) -> web.Response:
            await request.read()
            return web.Response(body=body, content_type="application/json")
        app.router.add_post(f"/v1/{route}", native_answer)
    options = parser.parse_args()
    if options.processes > 1:
        import multiprocessing

        def serve_copy() -> None:  # forked before any loop; they share the process group
            web.run_app(app, host="127.0.0.1", port=options.port, access_log=None, print=None,
                        reuse_port=True, backlog=1024)
        for _copy in range(options.processes - 1):
            multiprocessing.get_context("fork").Process(target=serve_copy).start()
    web.run_app(app, host="127.0.0.1", port=options.port, access_log=None,
                print=None, reuse_port=options.processes > 1, backlog=1024)
