"""A stand-in for the embedded child that validates like llama-cpp-python's server does.

`python tests/embedded/validating_child.py PORT` serves /v1/models, /v1/completions (the
readiness decode) and /v1/chat/completions on loopback. Every chat request is validated
with llama-cpp-python's own `CreateChatCompletionRequest`, the pydantic model its server
validates with: a body it refuses gets a 500 with the validation errors, as the real
server answers; an accepted one gets a simulated text answer (model "validating-child",
labelled as such). Each request body is appended to the file named by --record.
No model runs: this tests the path to the child, not the model.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from llama_cpp.server.types import CreateChatCompletionRequest
from pydantic import ValidationError

ARGS = argparse.Namespace()


def answer(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-sim", "object": "chat.completion", "created": 0,
            "model": "validating-child", "system_fingerprint": "simulated",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        print(f"validating child: {format % args}", flush=True)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "sim", "object": "model"}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/completions":
            self._send(200, {"id": "cmpl-sim", "object": "text_completion", "choices": [
                {"index": 0, "text": "!", "finish_reason": "length"}]})
            return
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        with open(ARGS.record, "ab") as record:
            record.write(raw.replace(b"\n", b" ") + b"\n")
        try:
            CreateChatCompletionRequest.model_validate(json.loads(raw))  # as FastAPI does
        except ValidationError as exc:
            self._send(500, {"error": {"message": str(exc), "type": "internal_server_error",
                                       "param": None, "code": None}})
            return
        if json.loads(raw).get("stream") is True:
            self._stream("It is sunny in Oslo.")
        else:
            self._send(200, answer("It is sunny in Oslo."))

    def _stream(self, text: str) -> None:
        chunks = [{"id": "chatcmpl-sim", "object": "chat.completion.chunk", "created": 0,
                   "model": "validating-child", "choices": [
                       {"index": 0, "delta": delta, "finish_reason": finish}]}
                  for delta, finish in (({"role": "assistant", "content": text}, None),
                                        ({}, "stop"))]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        data += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--record", required=True)
    parser.parse_args(namespace=ARGS)
    ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
