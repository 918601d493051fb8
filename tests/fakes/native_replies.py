"""Native Messages and Responses replies for the fake upstream, labelled as simulated."""

from __future__ import annotations

import json
from typing import Any

Reply = dict[str, Any]


def anthropic_message(*blocks: Reply, stop: str = "end_turn", usage: int = 10) -> Reply:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake-upstream",
            "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": usage, "output_tokens": usage}}


def text_block(text: str) -> Reply:
    return {"type": "text", "text": text}


def tool_use(name: str, arguments: Any, call_id: str = "toolu_1") -> Reply:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def thinking_block(thinking: str, signature: str = "sig-1") -> Reply:
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def redacted_block(data: str = "redacted-1") -> Reply:
    return {"type": "redacted_thinking", "data": data}


def anthropic_call(name: str, arguments: Any, call_id: str = "toolu_1",
                   text: str | None = None, thinking: list[Reply] | None = None) -> Reply:
    blocks = [*(thinking or []), *([text_block(text)] if text else []),
              tool_use(name, arguments, call_id)]
    return anthropic_message(*blocks, stop="tool_use")


def openai_response(*items: Reply, usage: int = 10) -> Reply:
    return {"id": "resp_fake", "object": "response", "created_at": 1700000000,
            "model": "fake-upstream", "status": "completed", "error": None,
            "incomplete_details": None, "output": list(items), "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "metadata": {},
            "usage": {"input_tokens": usage, "output_tokens": usage, "total_tokens": 2 * usage}}


def message_item(text: str) -> Reply:
    return {"type": "message", "id": "msg_item_fake", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def reasoning_item(summary: str, item_id: str = "rs_1",
                   encrypted: str | None = "enc-1") -> Reply:
    item: Reply = {"type": "reasoning", "id": item_id,
                   "summary": [{"type": "summary_text", "text": summary}]}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def function_call(name: str, arguments: Any, call_id: str = "call_1") -> Reply:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"type": "function_call", "id": "fc_fake", "call_id": call_id, "name": name,
            "arguments": args, "status": "completed"}


def _sse(name: str, data: Reply) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def anthropic_stream(message: Reply) -> list[bytes]:
    """A Messages reply as Anthropic streams it: text in 8-character deltas, input JSON in
    10-character ones (written independently of reflexguard's own writer)."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events = [_sse("message_start", {"type": "message_start", "message": start}),
              _sse("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        if block["type"] in ("thinking", "redacted_thinking"):
            events.extend(_thinking_events(index, block))
            continue
        opened: Reply  # a text block opens empty; a tool_use block with empty input
        if block["type"] == "text":
            opened, pieces, kind, key = {"type": "text", "text": ""}, block["text"], \
                "text_delta", "text"
        else:
            opened = {**block, "input": {}}
            pieces, kind, key = json.dumps(block["input"]), "input_json_delta", "partial_json"
        events.append(_sse("content_block_start", {"type": "content_block_start",
                                                   "index": index, "content_block": opened}))
        step = 8 if kind == "text_delta" else 10
        for at in range(0, len(pieces), step):
            events.append(_sse("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": kind, key: pieces[at:at + step]}}))
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(_sse("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                           "stop_sequence": None},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return events


def _thinking_events(index: int, block: Reply) -> list[bytes]:
    """A thinking block as Anthropic streams it: thinking in 8-character deltas, then the
    signature in one signature_delta; a redacted block whole in its start event."""
    opened = block if block["type"] == "redacted_thinking" else \
        {"type": "thinking", "thinking": "", "signature": ""}
    events = [_sse("content_block_start", {"type": "content_block_start", "index": index,
                                           "content_block": opened})]
    if block["type"] == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"][at:at + 8]}
                  for at in range(0, len(block["thinking"]), 8)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
        events.extend(_sse("content_block_delta", {"type": "content_block_delta",
                                                   "index": index, "delta": delta})
                      for delta in deltas)
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def responses_stream(response: Reply) -> list[bytes]:
    """A Responses reply as OpenAI streams it, with deltas of 8 and 10 characters."""
    events: list[bytes] = []

    def add(name: str, data: Reply) -> None:
        events.append(_sse(name, {"type": name, "sequence_number": len(events), **data}))

    add("response.created", {"response": {**response, "status": "in_progress", "output": []}})
    for index, item in enumerate(response["output"]):
        if item["type"] == "reasoning":
            add("response.output_item.added", {"output_index": index,
                                               "item": {**item, "summary": []}})
            for at, part in enumerate(item["summary"]):
                where = {"item_id": item["id"], "output_index": index, "summary_index": at}
                add("response.reasoning_summary_part.added", {
                    **where, "part": {"type": "summary_text", "text": ""}})
                for cut in range(0, len(part["text"]), 8):
                    add("response.reasoning_summary_text.delta", {
                        **where, "delta": part["text"][cut:cut + 8]})
                add("response.reasoning_summary_text.done", {**where, "text": part["text"]})
                add("response.reasoning_summary_part.done", {**where, "part": part})
        elif item["type"] == "message":
            add("response.output_item.added", {"output_index": index,
                                               "item": {**item, "content": []}})
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            add("response.content_part.added", {**where, "part": {
                "type": "output_text", "text": "", "annotations": []}})
            for at in range(0, len(text), 8):
                add("response.output_text.delta", {**where, "delta": text[at:at + 8],
                                                   "logprobs": []})
            add("response.output_text.done", {**where, "text": text, "logprobs": []})
            add("response.content_part.done", {**where, "part": item["content"][0]})
        else:
            add("response.output_item.added", {"output_index": index,
                                               "item": {**item, "arguments": ""}})
            args = item["arguments"]
            for at in range(0, len(args), 10):
                add("response.function_call_arguments.delta", {
                    "item_id": item["id"], "output_index": index, "delta": args[at:at + 10]})
            add("response.function_call_arguments.done", {
                "item_id": item["id"], "output_index": index, "arguments": args})
        add("response.output_item.done", {"output_index": index, "item": item})
    add("response.completed", {"response": response})
    return events
