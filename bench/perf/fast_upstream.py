"""A fast fake upstream for the overhead benchmark: one fixed, valid tool-call answer."""

from __future__ import annotations

import argparse

from aiohttp import web

from bench.perf.workload import ANSWER_BYTES


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=ANSWER_BYTES, content_type="application/json")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    # The other dialects' native routes (bench.overhead --dialect), one fixed answer each.
    from bench.perf.dialect_workload import WORKLOADS

    for route, _, native in (WORKLOADS["messages"], WORKLOADS["responses"]):
        async def native_answer(request: web.Request, body: bytes = native) -> web.Response:
            await request.read()
            return web.Response(body=body, content_type="application/json")
        app.router.add_post(f"/v1/{route}", native_answer)
    web.run_app(app, host="127.0.0.1", port=parser.parse_args().port, access_log=None,
                print=None)
