"""A stand-in for llama-cpp-python's server, for the supervisor tests (standard library only).

`python tests/fakes/fake_child.py PORT [--die SIGILL|SIGKILL|exit1] [--die-on chat|probe]
[--start-delay S]` serves /v1/models, /v1/completions and /v1/chat/completions on loopback.
With --die, it ends itself that way when it receives the chosen request (`chat`: a chat
completion whose last message says "die"; `probe`: the readiness decode), before
answering: the proxy's request is cut off mid-flight, as with a real crash.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ARGS = argparse.Namespace()


def die() -> None:
    if ARGS.die == "exit1":
        os._exit(1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from SIGILL
    os.kill(os.getpid(), getattr(signal, ARGS.die))
    time.sleep(10)


def chat_answer(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        print(f"fake child: {format % args}", flush=True)

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/v1/completions":
            if ARGS.die and ARGS.die_on == "probe":
                print("fake child: dying on the decode probe", flush=True)
                die()
            self._send({"id": "cmpl-fake", "object": "text_completion", "model": "fake",
                        "choices": [{"index": 0, "text": "!", "finish_reason": "length"}]})
        elif self.path == "/v1/chat/completions":
            last = str(body.get("messages", [{}])[-1].get("content", ""))
            if ARGS.die and ARGS.die_on == "chat" and "die" in last:
                print(f"fake child: dying with {ARGS.die} mid-request", flush=True)
                die()
            self._send(chat_answer(f"pid {os.getpid()} says hello"))
        else:
            self.send_error(404)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--die", choices=["SIGILL", "SIGKILL", "exit1"])
    parser.add_argument("--die-on", choices=["chat", "probe"], default="chat")
    parser.add_argument("--start-delay", type=float, default=0.0)
    parser.parse_args(namespace=ARGS)
    time.sleep(ARGS.start_delay)  # "loading the model": nothing listens yet
    ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
