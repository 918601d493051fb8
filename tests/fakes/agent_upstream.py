"""`python -m tests.fakes.agent_upstream PORT`: a scripted, SIMULATED model for a run of a
real agent CLI (Claude Code on /v1/messages, Codex CLI on /v1/responses) behind
reflexguard. The first tool-offering turn calls a tool that does not exist (`Bassh` or
`exec_comand`); every later turn answers with text. `GET /dump` returns what it received.
"""

from __future__ import annotations

import sys
from typing import Any

from aiohttp import web

from tests.fakes.fake_upstream import FakeUpstream, Scripted
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_message,
    function_call,
    message_item,
    openai_response,
    text_block,
)

FINAL = "SIMULATED-FINAL: the guard repaired my call"


def main(port: int) -> None:
    turns: list[str] = []

    def script(body: dict[str, Any]) -> Scripted:
        responses = "input" in body
        if not body.get("tools"):  # side requests (titles, summaries)
            return Scripted(openai_response(message_item("ok")) if responses
                            else anthropic_message(text_block("ok")))
        turns.append("tools")
        if len(turns) == 1:
            return Scripted(openai_response(function_call("exec_comand", {"cmd": "echo hi"}))
                            if responses else anthropic_call("Bassh", {"command": "echo hi"}))
        return Scripted(openai_response(message_item(FINAL)) if responses
                        else anthropic_message(text_block(FINAL)))

    fake = FakeUpstream(default=script)
    app = fake.app()

    async def dump(_: web.Request) -> web.Response:
        return web.json_response({"requests": fake.requests})

    app.router.add_get("/dump", dump)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main(int(sys.argv[1]))
