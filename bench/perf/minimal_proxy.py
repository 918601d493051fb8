"""The baseline: a minimal pass-through proxy, about 40 lines, aiohttp server and client.

reflexguard's overhead is reported as a ratio to what this adds over a direct call, so
the two use the same server, client and event loop.
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web


def build(upstream: str) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        async with app["session"].post(
            upstream + request.path.removeprefix("/v1"), data=body,
            headers={"Content-Type": "application/json"},
        ) as answer:
            return web.Response(status=answer.status, body=await answer.read(),
                                content_type="application/json")

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", forward)
    app.router.add_post("/v1/messages", forward)  # bench.overhead --dialect messages
    app.router.add_post("/v1/responses", forward)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(build(args.upstream), host="127.0.0.1", port=args.port, access_log=None,
                print=None)
