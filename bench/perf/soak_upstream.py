"""`python -m bench.soak_upstream --port N`: a scripted, faulty fake model server for the soak.

It is a fake, labelled as one (`system_fingerprint: "simulated-soak"`), on loopback
only. Each request's user turn carries `rid=<id> scenario=<name>`; the fake answers by
the scenario, counting attempts per id so a repair's re-ask gets the second act, and
echoes the id in the completion id and in the call's arguments, so the soak can tell
an answer that belongs to another request.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections import Counter
from typing import Any

import orjson
from aiohttp import web

from bench.perf.chunks import stream_chunks

TAG = re.compile(r"rid=(soak-[0-9a-f]+) scenario=([a-z0-9_]+)")
SCENARIOS = {  # name: weight (per cent)
    "valid": 40, "text": 8, "repair": 15, "slow": 10, "error_500": 5, "html_502": 5,
    "cut": 5, "garbage": 4, "hang": 2, "abort": 3, "huge_whitespace": 3,
}
HANG_SECONDS = 6.0  # past the proxy's upstream timeout in the soak (3 s): a 504


def _completion(rid: str, message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{rid}", "object": "chat.completion", "created": 1700000000,
        "model": "soak-fake", "system_fingerprint": "simulated-soak",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    }


def call(rid: str, arguments: str) -> dict[str, Any]:
    return _completion(rid, {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{rid}", "type": "function",
        "function": {"name": "cancel_pending_order", "arguments": arguments}}]}, "tool_calls")


def valid_call(rid: str) -> dict[str, Any]:
    return call(rid, orjson.dumps({"order_id": rid, "reason": "ordered by mistake"}).decode())


def text(rid: str, content: str) -> dict[str, Any]:
    return _completion(rid, {"role": "assistant", "content": content}, "stop")


class SoakUpstream:
    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        found = TAG.search(orjson.dumps(body.get("messages", [])).decode())
        if found is None:
            return web.json_response(text("soak-none", "no soak tag"))
        rid, scenario = found.groups()
        self.attempts[rid] += 1
        attempt = self.attempts[rid]
        stream = body.get("stream") is True
        if scenario == "slow":
            await asyncio.sleep(0.2 + (int(rid[-2:], 16) / 255) * 1.3)
        elif scenario in ("hang", "abort"):
            await asyncio.sleep(HANG_SECONDS if scenario == "hang" else 2.0)
        if scenario == "error_500":
            return web.json_response({"error": {"message": f"overloaded ({rid})",
                                                 "type": "server_error", "param": None,
                                                 "code": 500}}, status=500)
        if scenario == "html_502":
            return web.Response(status=502, content_type="text/html",
                                text=f"<html><body><h1>502 Bad Gateway</h1>{rid}</body></html>")
        if scenario == "garbage":
            return web.Response(status=200, content_type="text/event-stream" if stream
                                else "application/json", body=b"data: {not json\n\n<html>")
        if scenario == "repair" and attempt == 1:
            completion = call(rid, orjson.dumps({"order_id": rid}).decode())  # lacks reason
        elif scenario == "text":
            completion = text(rid, f"Order {rid} is pending; nothing to cancel yet.")
        elif scenario == "huge_whitespace":
            completion = text(rid, "{<tool_call>x" + "\n" * 20_000 + f"y {rid}")
        else:
            completion = valid_call(rid)
        if not stream:
            if scenario == "cut":
                return await _cut_body(request, orjson.dumps(completion))
            return web.json_response(completion)
        cut_after = 3 if scenario == "cut" else None
        return await _stream(request, completion, cut_after)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


async def _cut_body(request: web.Request, payload: bytes) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(payload)
    await response.prepare(request)
    await response.write(payload[: len(payload) // 2])
    assert request.transport is not None
    request.transport.close()  # half a body, then the connection drops
    return response


async def _stream(request: web.Request, completion: dict[str, Any],
                  cut_after: int | None) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        for sent, chunk in enumerate(stream_chunks(completion, include_usage=False)):
            if cut_after is not None and sent >= cut_after:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:
        pass  # the proxy gave up first (its timeout, or its client left)
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(SoakUpstream().app(), host="127.0.0.1", port=args.port, print=None,
                access_log=None, backlog=1024)


if __name__ == "__main__":
    main()
