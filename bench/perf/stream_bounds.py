"""`python -m bench.perf.stream_bounds`: streams at the sizes of issue 18, through reflexguard.

In one run it starts a fake upstream (`--serve-upstream`, its own process, labelled
simulated) and reflexguard (`python -m reflexguard serve`, its own process; with
`--against DIR` a second one imported from DIR, e.g. a `git worktree` of the old code),
then prints, never asserts (the machine is shared: only ratios from one run mean much):

1. held vs not held: a 160 KB code block in 40,000 four-character deltas (held: it opens
   with a fence) against the same text opening with "Hello" (released at once), per
   dialect; reflexguard's CPU seconds (from /proc) for each, and their ratio (goal <= 1.2).
2. a 600 KB tool-call argument streamed in each dialect (chat in one chunk, Messages and
   Responses in 1 KB deltas, whose `.done` events carry it whole): the status, whether
   the call came back whole, the time, and reflexguard's peak RSS (VmHWM), each in a fresh
   process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.perf.processes import process
from reflexguard.ops.loopback import free_port

DELTAS = 40_000
PIECE = "x = "  # four characters: 160 KB in 40,000 deltas
BIG_ARGUMENT = 600_000
TOOL = {"name": "write_file", "description": "Write a file.",
        "parameters": {"type": "object", "required": ["path", "content"],
                       "properties": {"path": {"type": "string"},
                                      "content": {"type": "string"}}}}
ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
          "responses": "/v1/responses"}


# -- the fake upstream (simulated) ----------------------------------------------------------


def _sse(name: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def text_events(dialect: str, deltas: list[str]) -> bytes:
    """A text-only answer of `deltas`, as `dialect` streams it."""
    if dialect == "chat":
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                "model": "simulated"}
        events = [_sse(None, {**base, "choices": [{"index": 0, "delta": {"content": d},
                                                   "finish_reason": None}]}) for d in deltas]
        events.append(_sse(None, {**base, "choices": [{"index": 0, "delta": {},
                                                       "finish_reason": "stop"}]}))
        return b"".join(events) + b"data: [DONE]\n\n"
    if dialect == "messages":
        start: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                                 "model": "simulated", "content": [], "stop_reason": None,
                                 "usage": {"input_tokens": 5, "output_tokens": 1}}
        events = [_sse("message_start", {"type": "message_start", "message": start}),
                  _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})]
        events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": d}})
                   for d in deltas]
        events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   _sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": "end_turn"},
                                          "usage": {"output_tokens": len(deltas)}}),
                   _sse("message_stop", {"type": "message_stop"})]
        return b"".join(events)
    text = "".join(deltas)
    item = {"type": "message", "id": "m1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return b"".join(_responses([
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "content": [], "status": "in_progress"}},
        *({"type": "response.output_text.delta", "item_id": "m1", "output_index": 0,
           "content_index": 0, "delta": d} for d in deltas),
        {"type": "response.output_item.done", "output_index": 0, "item": item}], [item]))


def _responses(middle: list[dict[str, Any]], output: list[dict[str, Any]]) -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "simulated",
                "status": "completed", "output": output, "error": None, "tools": [],
                "incomplete_details": None, "parallel_tool_calls": True, "metadata": {},
                "tool_choice": "auto",
                "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}}
    events = [{"type": "response.created",
               "response": {**response, "status": "in_progress", "output": []}},
              *middle, {"type": "response.completed", "response": response}]
    return [_sse(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def call_events(dialect: str, arguments: str) -> bytes:
    """One call of `arguments`: chat in one chunk, the others in 1 KB deltas."""
    step = 1024
    if dialect == "chat":
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                "model": "simulated"}
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "write_file", "arguments": arguments}}
        return (_sse(None, {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]},
                                                 "finish_reason": None}]})
                + _sse(None, {**base, "choices": [{"index": 0, "delta": {},
                                                   "finish_reason": "tool_calls"}]})
                + b"data: [DONE]\n\n")
    if dialect == "messages":
        start: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                                 "model": "simulated", "content": [], "stop_reason": None,
                                 "usage": {"input_tokens": 5, "output_tokens": 1}}
        block = {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}
        events = [_sse("message_start", {"type": "message_start", "message": start}),
                  _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": block})]
        events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "input_json_delta",
                                                          "partial_json": arguments[at:at + step]}})
                   for at in range(0, len(arguments), step)]
        events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   _sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": "tool_use"},
                                          "usage": {"output_tokens": 5}}),
                   _sse("message_stop", {"type": "message_stop"})]
        return b"".join(events)
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "write_file",
            "arguments": arguments, "status": "completed"}
    return b"".join(_responses([
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "arguments": "", "status": "in_progress"}},
        *({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
           "output_index": 0, "delta": arguments[at:at + step]}
          for at in range(0, len(arguments), step)),
        {"type": "response.function_call_arguments.done", "item_id": "fc_1",
         "output_index": 0, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": 0, "item": item}], [item]))


def big_arguments() -> str:
    return json.dumps({"path": "big.py", "content": "#" * BIG_ARGUMENT})


def serve_upstream(port: int) -> None:
    """The fake: the request's `model` names the scene (held / plain / big)."""
    code = [PIECE] * DELTAS
    rendered = {(scene, dialect): events
                for dialect in ROUTES
                for scene, events in (
                    ("held", text_events(dialect, ["```python\n", *code, "\n```"])),
                    ("plain", text_events(dialect, ["Hello\n", *code, "\n```"])),
                    ("big", call_events(dialect, big_arguments())))}

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        dialect = next(d for d, path in ROUTES.items() if request.path == path)
        events = rendered[str(body.get("model")), dialect]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for at in range(0, len(events), 1 << 16):
            await response.write(events[at:at + (1 << 16)])
        await response.write_eof()
        return response

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- the measurements -------------------------------------------------------------------------


def body(dialect: str, scene: str) -> dict[str, Any]:
    ask = [{"role": "user", "content": "Write the file."}]
    if dialect == "chat":
        return {"model": scene, "messages": ask, "stream": True,
                "tools": [{"type": "function", "function": TOOL}]}
    if dialect == "messages":
        return {"model": scene, "max_tokens": 1024, "messages": ask, "stream": True,
                "tools": [{"name": TOOL["name"], "description": TOOL["description"],
                           "input_schema": TOOL["parameters"]}]}
    return {"model": scene, "input": "Write the file.", "stream": True,
            "tools": [{"type": "function", **TOOL}]}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one(port: int, dialect: str, scene: str) -> tuple[int, bytes, float]:
    began = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=1000)  # over reflexguard's own request_timeout
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
            f"http://127.0.0.1:{port}{ROUTES[dialect]}", json=body(dialect, scene)) as answer:
        data = await answer.read()
        return answer.status, data, time.perf_counter() - began


def carries_big_call(dialect: str, data: bytes) -> bool:
    """Whether the streamed answer holds the 600 KB call whole."""
    pieces: list[str] = []
    for event in data.decode(errors="replace").split("\n\n"):
        line = next((x for x in event.split("\n") if x.startswith("data: ")), "")
        payload = line[6:]
        if not payload or payload == "[DONE]":
            continue
        value = json.loads(payload)
        if dialect == "chat":
            for choice in value.get("choices", []):
                for call in choice.get("delta", {}).get("tool_calls", []):
                    pieces.append(call.get("function", {}).get("arguments", ""))
        elif dialect == "messages":
            if value.get("delta", {}).get("type") == "input_json_delta":
                pieces.append(value["delta"]["partial_json"])
        elif value.get("type") == "response.function_call_arguments.done":
            pieces = [value["arguments"]]
    try:
        return bool(json.loads("".join(pieces)) == json.loads(big_arguments()))
    except ValueError:
        return False


def guard_args(upstream: int, port: int) -> list[str]:
    return ["-m", "reflexguard", "serve", "--upstream", f"http://127.0.0.1:{upstream}/v1",
            "--port", str(port)]


def held_ratio(name: str, env: dict[str, str] | None, upstream: int, rounds: int) -> None:
    port = free_port()
    with process(guard_args(upstream, port), port, env) as child:
        for dialect in ROUTES:
            costs: dict[str, list[float]] = {"held": [], "plain": []}
            for _ in range(rounds):
                for scene in costs:
                    before = cpu_seconds(child.pid)
                    status, _, _ = asyncio.run(one(port, dialect, scene))
                    costs[scene].append(cpu_seconds(child.pid) - before)
                    assert status == 200, (name, dialect, scene, status)
            held, plain = (statistics.median(costs[s]) for s in ("held", "plain"))
            print(f"{name:<8} {dialect:<10} {held:>9.2f} {plain:>9.2f} "
                  f"{held / plain if plain else float('nan'):>7.2f}", flush=True)


def big_call(name: str, env: dict[str, str] | None, upstream: int) -> None:
    for dialect in ROUTES:
        port = free_port()
        with process(guard_args(upstream, port), port, env) as child:
            asyncio.run(asyncio.sleep(0.5))
            idle = peak_rss_mb(child.pid)
            status, data, seconds = asyncio.run(one(port, dialect, "big"))
            whole = status == 200 and carries_big_call(dialect, data)
            print(f"{name:<8} {dialect:<10} {status:>6} {whole!s:>6} {seconds:>8.2f} "
                  f"{idle:>9.0f} {peak_rss_mb(child.pid):>9.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.stream_bounds")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also run reflexguard imported from DIR (a worktree)")
    parser.add_argument("--rounds", type=int, default=3, help="held/plain pairs per dialect")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    arms: list[tuple[str, dict[str, str] | None]] = [("this", None)]
    if args.against:
        # PYTHONSAFEPATH: without it `-m` puts the working directory, this tree, first.
        arms.append(("against", {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(args.against)}))
    upstream = free_port()
    with process(["-m", "bench.perf.stream_bounds", "--serve-upstream", str(upstream)],
                 upstream):
        print(f"held vs not held: {DELTAS} deltas of {len(PIECE)} characters, reflexguard's "
              f"CPU seconds (median of {args.rounds})")
        print(f"{'arm':<8} {'dialect':<10} {'held':>9} {'plain':>9} {'ratio':>7}")
        for name, env in arms:  # the old code's held streams are slow: one round there
            held_ratio(name, env, upstream, args.rounds if env is None else 1)
        print(f"\na {BIG_ARGUMENT // 1000} KB tool-call argument, streamed (fresh process "
              "each): peak RSS before and after, MB")
        print(f"{'arm':<8} {'dialect':<10} {'status':>6} {'whole':>6} {'seconds':>8} "
              f"{'idle_rss':>9} {'peak_rss':>9}")
        for name, env in arms:
            big_call(name, env, upstream)


if __name__ == "__main__":
    main()
