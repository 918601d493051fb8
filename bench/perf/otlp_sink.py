"""`python -m bench.perf.otlp_sink --port P`: an OTLP/HTTP endpoint that accepts every
export and keeps nothing, for `bench.overhead --otel on` (a collector stands in another
process in production too, so its CPU is not reflexguard's).

An I/O edge. It answers what a collector answers: 200 and an empty export response
(an empty protobuf message is zero bytes), and counts what it got, for the record.
"""

from __future__ import annotations

import argparse

from aiohttp import web

PROTOBUF = "application/x-protobuf"


def app() -> web.Application:
    counts = {"exports": 0, "bytes": 0}

    async def export(request: web.Request) -> web.Response:
        body = await request.read()
        counts["exports"] += 1
        counts["bytes"] += len(body)
        return web.Response(body=b"", content_type=PROTOBUF)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(counts)

    made = web.Application(client_max_size=64 * 1024 * 1024)
    made.router.add_post("/v1/traces", export)
    made.router.add_post("/v1/metrics", export)
    made.router.add_post("/v1/logs", export)
    made.router.add_get("/stats", stats)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(app(), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
