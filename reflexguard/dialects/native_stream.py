"""Writing a finished Messages or Responses reply as that dialect's event stream. No I/O.

Each function takes the reply as its non-streamed body would be and returns the SSE
events, in exactly the order and shape the official SDKs' stream parsers accumulate:
Messages' message_start / content_block_* / message_delta / message_stop, and Responses'
response.created / output_item / output_text / function_call_arguments / completed.
"""

from __future__ import annotations

import uuid
from typing import Any

from reflexguard.core import json_text
from reflexguard.core.model import JsonObject, as_object
from reflexguard.dialects.native_events import (
    THINKING,
    MessagesEvents,
    ResponsesEvents,
    count_of,
)

__all__ = ["MessagesEvents", "MessagesWriter", "ResponsesEvents", "ResponsesWriter", "event",
           "message_events", "messages_error_event", "response_events",
           "responses_error_event"]


def event(name: str, data: JsonObject) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json_text.dumps(data) + b"\n\n"


# -- Anthropic Messages -------------------------------------------------------------------


def _block_events(index: int, block: JsonObject) -> list[bytes]:
    kind = block.get("type")
    if kind == "text":
        start: JsonObject = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": block.get("text", "")}]
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                 "input": {}}
        deltas = [{"type": "input_json_delta",
                   "partial_json": json_text.dumps(block.get("input", {})).decode()}]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                  {"type": "signature_delta", "signature": block.get("signature", "")}]
    else:  # redacted thinking, server tool blocks: whole in the start event
        start, deltas = block, []
    return [event("content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": start}),
            *(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": delta}) for delta in deltas),
            event("content_block_stop", {"type": "content_block_stop", "index": index})]


def message_start(message: JsonObject) -> bytes:
    usage = dict(as_object(message.get("usage")))
    usage["input_tokens"] = count_of(usage.get("input_tokens"))
    usage["output_tokens"] = min(1, count_of(usage.get("output_tokens")))
    start = {**{k: v for k, v in message.items() if k not in ("content", "usage")},
             "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    return event("message_start", {"type": "message_start", "message": start})


def message_events(message: JsonObject, started: bool = False,
                   first_index: int = 0) -> list[bytes]:
    """The whole stream of a Messages reply; `started` when message_start (and blocks
    before `first_index`) are already out, as when text was streamed through at once."""
    events = [] if started else [message_start(message),
                                 event("ping", {"type": "ping"})]
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
    for index, block in enumerate(blocks[first_index:], start=first_index):
        events.extend(_block_events(index, block))
    usage = as_object(message.get("usage"))
    events.append(event("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message.get("stop_reason"),
                  "stop_sequence": message.get("stop_sequence")},
        "usage": {"output_tokens": count_of(usage.get("output_tokens"))}}))
    events.append(event("message_stop", {"type": "message_stop"}))
    return events


def messages_error_event(message: str) -> bytes:
    return event("error", {"type": "error", "error": {"type": "api_error", "message": message}})


# -- OpenAI Responses ---------------------------------------------------------------------


class _Sequence:
    def __init__(self) -> None:
        self.number = 0

    def __call__(self, name: str, data: JsonObject) -> bytes:
        out = event(name, {"type": name, "sequence_number": self.number, **data})
        self.number += 1
        return out


def _item_events(seq: _Sequence, index: int, item: JsonObject) -> list[bytes]:
    kind = item.get("type")
    item_id = item.get("id")
    if kind == "message":
        events = [seq("response.output_item.added", {"output_index": index, "item": {
            **item, "status": "in_progress", "content": []}})]
        for part_index, part in enumerate(item.get("content") or []):
            part = as_object(part)
            where = {"item_id": item_id, "output_index": index, "content_index": part_index}
            text = part.get("text", "")
            events.append(seq("response.content_part.added", {
                **where, "part": {**part, "text": ""}}))
            if text:
                events.append(seq("response.output_text.delta", {
                    **where, "delta": text, "logprobs": []}))
            events.append(seq("response.output_text.done", {
                **where, "text": text, "logprobs": []}))
            events.append(seq("response.content_part.done", {**where, "part": part}))
    elif kind == "function_call":
        events = [seq("response.output_item.added", {"output_index": index, "item": {
            **item, "arguments": "", "status": "in_progress"}})]
        where = {"item_id": item_id, "output_index": index}
        arguments = item.get("arguments", "")
        if arguments:
            events.append(seq("response.function_call_arguments.delta", {
                **where, "delta": arguments}))
        events.append(seq("response.function_call_arguments.done", {
            **where, "name": item.get("name"), "arguments": arguments}))
    else:  # reasoning and built-in tool items: whole, added then done
        events = [seq("response.output_item.added", {"output_index": index, "item": item})]
    events.append(seq("response.output_item.done", {"output_index": index, "item": item}))
    return events


def response_events(response: JsonObject) -> list[bytes]:
    seq = _Sequence()
    pending: dict[str, Any] = {**response, "status": "in_progress", "output": [],
                               "usage": None, "incomplete_details": None}
    events = [seq("response.created", {"response": pending}),
              seq("response.in_progress", {"response": pending})]
    items = [i for i in response.get("output") or [] if isinstance(i, dict)]
    for index, item in enumerate(items):
        events.extend(_item_events(seq, index, item))
    final = "response.incomplete" if response.get("status") == "incomplete" else \
        "response.completed"
    events.append(seq(final, {"response": response}))
    return events


def responses_error_event(message: str, sequence_number: int = 0) -> bytes:
    return event("error", {"type": "error", "sequence_number": sequence_number,
                           "code": "upstream_error", "message": message, "param": None})


# -- live streams: upstream events in, the core's chat chunks out, text written at once ---


class MessagesWriter:
    """Writes a Messages stream as it goes: text deltas at once, held calls at the end."""

    def __init__(self, skeleton: JsonObject) -> None:
        self.skeleton = skeleton  # a message_start message: id, model, usage
        self.started = False
        self.index = 0
        self.text_open = False

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        return [message_start(self.skeleton), event("ping", {"type": "ping"})]

    def text(self, delta: str) -> list[bytes]:
        out = self._start()
        if not self.text_open:
            self.text_open = True
            out.append(event("content_block_start", {
                "type": "content_block_start", "index": self.index,
                "content_block": {"type": "text", "text": ""}}))
        out.append(event("content_block_delta", {
            "type": "content_block_delta", "index": self.index,
            "delta": {"type": "text_delta", "text": delta}}))
        return out

    def _close_text(self) -> list[bytes]:
        if not self.text_open:
            return []
        self.text_open = False
        self.index += 1
        return [event("content_block_stop", {"type": "content_block_stop",
                                             "index": self.index - 1})]

    def forward(self, data: JsonObject) -> list[bytes]:
        """An upstream thinking block's own start / delta / stop event, written as it came,
        at this stream's next content block index."""
        kind = data.get("type")
        out = self._start()
        if kind == "content_block_start":
            out.extend(self._close_text())
        out.append(event(str(kind), {**data, "index": self.index}))
        if kind == "content_block_stop":
            self.index += 1
        return out

    def finish(self, reply: JsonObject, text: str | None) -> list[bytes]:
        """The rest of the stream: the reply's thinking blocks (those a re-ask's reply
        brought; the upstream's own were forwarded as they came), `text` (held until now),
        the reply's calls, the end."""
        out = self._start()
        blocks = [b for b in reply.get("content") or []
                  if isinstance(b, dict) and b.get("type") != "text"]
        thinking = [b for b in blocks if b.get("type") in THINKING]
        if not self.text_open:  # before the text, where a reply has them
            out.extend(self._blocks(thinking))
            thinking = []
        if text:
            out.extend(self.text(text))
        out.extend(self._close_text())
        out.extend(self._blocks(thinking))
        out.extend(self._blocks([b for b in blocks if b.get("type") not in THINKING]))
        return out + message_events(reply, started=True, first_index=len(reply["content"]))

    def _blocks(self, blocks: list[JsonObject]) -> list[bytes]:
        out: list[bytes] = []
        for block in blocks:
            out.extend(_block_events(self.index, block))
            self.index += 1
        return out


class ResponsesWriter:
    """Writes a Responses stream as it goes: text deltas and the upstream's reasoning items
    at once, held calls at the end."""

    def __init__(self, skeleton: JsonObject) -> None:
        self.skeleton = skeleton  # the response as response.created shows it
        self.seq = _Sequence()
        self.started = False
        self.message: JsonObject | None = None
        self.message_index = 0
        self.text_parts: list[str] = []
        self.next_index = 0
        self.output: dict[int, JsonObject] = {}  # output index -> item done
        self.forwarded: dict[int, int] = {}  # upstream output index -> ours
        self.forwarded_ids: set[str] = set()

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        pending = {**self.skeleton, "status": "in_progress", "output": [], "usage": None}
        return [self.seq("response.created", {"response": pending}),
                self.seq("response.in_progress", {"response": pending})]

    def text(self, delta: str) -> list[bytes]:
        out = self._start()
        if self.message is None:
            self.message = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}",
                            "status": "in_progress",
                            "role": "assistant", "content": []}
            self.message_index = self.next_index
            self.next_index += 1
            where = {"item_id": self.message["id"], "output_index": self.message_index,
                     "content_index": 0}
            out.append(self.seq("response.output_item.added",
                                {"output_index": self.message_index, "item": self.message}))
            out.append(self.seq("response.content_part.added", {
                **where, "part": {"type": "output_text", "text": "", "annotations": []}}))
        self.text_parts.append(delta)
        out.append(self.seq("response.output_text.delta", {
            "item_id": self.message["id"], "output_index": self.message_index,
            "content_index": 0, "delta": delta, "logprobs": []}))
        return out

    def forward(self, data: JsonObject) -> list[bytes]:
        """An event of an upstream reasoning item (added, summary or text parts, done),
        written as it came at this stream's output index and sequence number."""
        out = self._start()
        kind = str(data.get("type"))
        upstream = data.get("output_index")
        if kind == "response.output_item.added" and isinstance(upstream, int):
            self.forwarded[upstream] = self.next_index
            self.next_index += 1
        index = self.forwarded.get(upstream) if isinstance(upstream, int) else None
        if index is None:  # an event of an item never added: nowhere to put it
            return out
        fields = {k: v for k, v in data.items() if k not in ("type", "sequence_number")}
        out.append(self.seq(kind, {**fields, "output_index": index}))
        if kind == "response.output_item.done":
            item = as_object(data.get("item"))
            self.output[index] = item
            if isinstance(item.get("id"), str):
                self.forwarded_ids.add(item["id"])
        return out

    def error(self, message: str) -> bytes:
        """The `error` event that ends this stream, numbered after the events before it."""
        out = responses_error_event(message, self.seq.number)
        self.seq.number += 1
        return out

    def _items(self, items: list[JsonObject]) -> list[bytes]:
        out: list[bytes] = []
        for item in items:
            out.extend(_item_events(self.seq, self.next_index, item))
            self.output[self.next_index] = item
            self.next_index += 1
        return out

    def finish(self, reply: JsonObject, text: str | None) -> list[bytes]:
        out = self._start()
        items = [i for i in reply.get("output") or [] if isinstance(i, dict)
                 and i.get("type") != "message" and i.get("id") not in self.forwarded_ids]
        reasoning = [i for i in items if i.get("type") == "reasoning"]
        others = [i for i in items if i.get("type") != "reasoning"]
        if self.message is None:  # a re-ask's reasoning before its text, as a reply has it
            out.extend(self._items(reasoning))
            reasoning = []
        if text:
            out.extend(self.text(text))
        if self.message is not None:
            full = "".join(self.text_parts)
            part = {"type": "output_text", "text": full, "annotations": []}
            where = {"item_id": self.message["id"], "output_index": self.message_index,
                     "content_index": 0}
            out.append(self.seq("response.output_text.done",
                                {**where, "text": full, "logprobs": []}))
            out.append(self.seq("response.content_part.done", {**where, "part": part}))
            item = {**self.message, "status": "completed", "content": [part]}
            out.append(self.seq("response.output_item.done",
                                {"output_index": self.message_index, "item": item}))
            self.output[self.message_index] = item
        out.extend(self._items(reasoning))
        out.extend(self._items(others))
        output = [self.output[index] for index in sorted(self.output)]
        final = "response.incomplete" if reply.get("status") == "incomplete" else \
            "response.completed"
        # The id response.created showed, even when a re-ask's reply supplied the calls.
        out.append(self.seq(final, {"response": {**reply, "id": self.skeleton.get("id"),
                                                 "output": output}}))
        return out
