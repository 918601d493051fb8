"""The baseline: a minimal pass-through proxy, about 40 lines, aiohttp server and client.

reflexguard's overhead is reported as a ratio to what this adds over a direct call, so
the two use the same server, client and event loop. `--processes N` runs N copies on one
port (SO_REUSEPORT, a socket each, as `reflexguard serve --workers N` does): the baseline
for reflexguard's workers (issue 11).
"""

from __future__ import annotations

import argparse
import multiprocessing

import aiohttp
from aiohttp import web


def build(upstream: str) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' in body:  # bench.overhead --stream: the same bytes, as they come
            return await relay(request, body)
        async with app["session"].post(
            upstream + request.path.removeprefix("/v1"), data=body,
            headers={"Content-Type": "application/json"},
        ) as answer:
            return web.Response(status=answer.status, body=await answer.read(),
                                content_type="application/json")

    async def relay(request: web.Request, body: bytes) -> web.StreamResponse:
        async with app["session"].post(
            upstream + request.path.removeprefix("/v1"), data=body,
            headers={"Content-Type": "application/json"},
        ) as answer:
            response = web.StreamResponse(status=answer.status,
                                          headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", forward)
    app.router.add_post("/v1/messages", forward)  # bench.overhead --dialect messages
    app.router.add_post("/v1/responses", forward)
    return app


def serve(upstream: str, port: int, reuse_port: bool) -> None:
    web.run_app(build(upstream), host="127.0.0.1", port=port, access_log=None, print=None,
                reuse_port=reuse_port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    shared = args.processes > 1
    # Forked before any event loop exists; they share the process group, so stopping the
    # benchmark's child (its whole group) stops them all.
    for _ in range(args.processes - 1):
        multiprocessing.get_context("fork").Process(
            target=serve, args=(args.upstream, args.port, True)).start()
    serve(args.upstream, args.port, shared)
