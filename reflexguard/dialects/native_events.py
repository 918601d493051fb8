"""Reading a native Messages or Responses event stream into the core's chat chunks. No I/O.

The upstream may legally send fields the SDKs declare nullable (Anthropic's
`usage.input_tokens`), and a hostile or buggy one anything at all: every field is read as
the non-streamed parsers read it, never with `int(...)` on what came, so no event can
raise. What had to be read leniently is noted in `oddities` for the http edge to count.
"""

from __future__ import annotations

from typing import Any

from reflexguard.core.model import JsonObject, as_object

THINKING = ("thinking", "redacted_thinking")


def count_of(value: Any) -> int:
    """A token count as the non-streamed parsers take it: an int (a digit string too, as
    some servers send); anything else (null, which the Anthropic SDKs declare legal, a
    float, a word) is 0, never an error."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.isdigit() and len(value) < 20:
        return int(value)
    return 0


def index_of(value: Any) -> int | None:
    """An event's `index` / `output_index`: an int or a digit string; None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 20:
        return int(value)
    return None


def _odd(oddities: list[str], what: str) -> None:
    """Noted once per kind and stream: the http edge counts them (fallback events)."""
    if what not in oddities and len(oddities) < 16:
        oddities.append(what)


class MessagesEvents:
    """A native Messages stream read into the chat chunks the core's assembler takes.

    Fields are read as the non-streamed parser reads them: an index that is null or not a
    number names the block last started, a usage count that is null or a word is 0; each
    such oddity is noted in `oddities` (the http edge counts it), never an error."""

    def __init__(self) -> None:
        self.skeleton: JsonObject = {}
        self.calls: dict[int, int] = {}  # content block index -> call index
        self.done = False
        self.forward: list[JsonObject] = []  # thinking events to write as they are
        self.thinking: dict[int, _Thinking] = {}  # content block index -> open block
        self.blocks: list[_Thinking] = []  # every thinking block, in order
        self.oddities: list[str] = []
        self.current = 0  # the index of the block last started
        self.started = 0  # content_block_start events seen

    @property
    def reasoning(self) -> list[JsonObject]:
        """The thinking blocks, accumulated (joined once here, not on every delta)."""
        return [block.whole() for block in self.blocks]

    def _index(self, data: JsonObject, start: bool) -> int:
        index = index_of(data.get("index"))
        if index is None:
            _odd(self.oddities, "index")
            # A start without a usable index opens a block of its own (past any real one).
            index = -1 - self.started if start else self.current
        if start:
            self.current = index
            self.started += 1
        return index

    def chunks(self, data: JsonObject) -> list[JsonObject]:
        kind = data.get("type")
        if kind == "content_block_delta" and not self.thinking:
            # Most events: a text or argument delta at a well-formed index, outside any
            # thinking block; read here in one step, as the full reading below reads it.
            index, delta = data.get("index"), data.get("delta")
            if type(index) is int and isinstance(delta, dict):
                part = delta.get("type")
                if part == "input_json_delta":
                    return [self._chunk({"tool_calls": [{
                        "index": self.calls.get(index, 0),
                        "function": {"arguments": delta.get("partial_json", "")}}]})]
                if part == "text_delta":
                    return [self._chunk({"content": delta.get("text", "")})]
        if kind == "message_start":
            self.skeleton = as_object(data.get("message"))
            return [self._chunk({"role": "assistant"})]
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._message_event(kind, data)
        index = self._index(data, kind == "content_block_start")
        if self._thinking(index, data):
            return []
        if kind == "content_block_start":
            block = as_object(data.get("content_block"))
            if block.get("type") == "tool_use":
                call = self.calls.setdefault(index, len(self.calls))
                return [self._chunk({"tool_calls": [{"index": call, "id": block.get("id"),
                                                     "function": {"name": block.get("name"),
                                                                  "arguments": ""}}]})]
            if block.get("type") == "text" and isinstance(block.get("text"), str) \
                    and block["text"]:
                return [self._chunk({"content": block["text"]})]
            return []
        if kind == "content_block_delta":
            delta = as_object(data.get("delta"))
            if delta.get("type") == "text_delta":
                return [self._chunk({"content": delta.get("text", "")})]
            if delta.get("type") == "input_json_delta":
                return [self._chunk({"tool_calls": [{"index": self.calls.get(index, 0),
                                                     "function": {"arguments": delta.get(
                                                         "partial_json", "")}}]})]
        return []

    def _message_event(self, kind: Any, data: JsonObject) -> list[JsonObject]:
        if kind == "message_delta":
            stop = as_object(data.get("delta")).get("stop_reason")
            usage = {**as_object(self.skeleton.get("usage")), **as_object(data.get("usage"))}
            prompt, output = (count_of(usage.get("input_tokens")),
                              count_of(usage.get("output_tokens")))
            if (prompt, output) != (usage.get("input_tokens"), usage.get("output_tokens")):
                _odd(self.oddities, "usage")
            usage.update(input_tokens=prompt, output_tokens=output)
            self.skeleton = {**self.skeleton, "usage": usage, "stop_reason": stop}
            finish = {"end_turn": "stop", "tool_use": "tool_calls",
                      "max_tokens": "length"}.get(str(stop), "stop")
            return [{**self._chunk({}, finish), "usage": {
                "prompt_tokens": prompt, "completion_tokens": output,
                "total_tokens": prompt + output}}]
        if kind == "message_stop":
            self.done = True
        return []

    def _thinking(self, index: int, data: JsonObject) -> bool:
        """Whether `data` is an event of a thinking block: if so kept to forward, and the
        block accumulated (thinking and signature deltas) for the re-ask's echo."""
        if data.get("type") == "content_block_start":
            block = as_object(data.get("content_block"))
            if block.get("type") not in THINKING:
                return False
            self.thinking[index] = _Thinking(dict(block))
            self.blocks.append(self.thinking[index])
        elif index not in self.thinking:
            return False
        elif data.get("type") == "content_block_delta":
            self.thinking[index].add(as_object(data.get("delta")))
        else:
            del self.thinking[index]
        self.forward.append({**data, "index": index})
        return True

    def _chunk(self, delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {"id": self.skeleton.get("id"), "model": self.skeleton.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class _Thinking:
    """One thinking block as its deltas arrive: the pieces kept, joined once."""

    def __init__(self, start: JsonObject) -> None:
        self.start = start
        self.pieces: dict[str, list[str]] = {}

    def add(self, delta: JsonObject) -> None:
        for key in ("thinking", "signature"):
            if isinstance(delta.get(key), str):
                self.pieces.setdefault(key, []).append(delta[key])

    def whole(self) -> JsonObject:
        block = dict(self.start)
        for key, pieces in self.pieces.items():
            first = block.get(key)
            block[key] = (first if isinstance(first, str) else "") + "".join(pieces)
        return block


_DELTAS = ("response.output_text.delta", "response.function_call_arguments.delta")
_ITEM_EVENTS = ("response.output_item.added", "response.output_text.delta",
                "response.function_call_arguments.delta")


class ResponsesEvents:
    """A native Responses stream read into the chat chunks the core's assembler takes,
    its odd fields read as MessagesEvents reads them."""

    def __init__(self) -> None:
        self.skeleton: JsonObject = {}
        self.calls: dict[int, int] = {}  # output index -> call index
        self.done = False
        self.forward: list[JsonObject] = []  # reasoning item events to write as they are
        self.reasoning: list[JsonObject] = []  # the reasoning items, done
        self.passing: set[int] = set()  # output indices of reasoning items
        self.oddities: list[str] = []
        self.current = 0  # the output index last added

    def _where(self, data: JsonObject, kind: Any) -> int:
        where = index_of(data.get("output_index"))
        if where is None:
            _odd(self.oddities, "output_index")
            where = self.current + 1 if kind == "response.output_item.added" else self.current
        if kind == "response.output_item.added":
            self.current = where
        return where

    def chunks(self, data: JsonObject) -> list[JsonObject]:
        kind = data.get("type")
        if kind in _DELTAS:
            # Most events: a text or argument delta of an item that is no reasoning item,
            # at a well-formed index; read here in one step, as the full reading below.
            where = data.get("output_index")
            if type(where) is int and where not in self.passing:
                if kind == "response.function_call_arguments.delta":
                    return [self._chunk({"tool_calls": [{
                        "index": self.calls.get(where, 0),
                        "function": {"arguments": data.get("delta", "")}}]})]
                return [self._chunk({"content": data.get("delta", "")})]
        if kind == "response.created":
            self.skeleton = as_object(data.get("response"))
            return [self._chunk({"role": "assistant"})]
        if kind in ("response.completed", "response.incomplete"):
            return self._end(kind, data)
        if "output_index" not in data and kind not in _ITEM_EVENTS:
            return []  # response.in_progress and the like: nothing of an item
        where = self._where(data, kind)
        if where in self.passing or (kind == "response.output_item.added"
                                     and as_object(data.get("item")).get("type") == "reasoning"):
            self.passing.add(where)
            self.forward.append({**data, "output_index": where})
            if kind == "response.output_item.done":
                self.reasoning.append(as_object(data.get("item")))
            return []
        if kind == "response.output_item.added":
            item = as_object(data.get("item"))
            if item.get("type") == "function_call":
                index = self.calls.setdefault(where, len(self.calls))
                return [self._chunk({"tool_calls": [{"index": index, "id": item.get("call_id"),
                                                     "function": {"name": item.get("name"),
                                                                  "arguments": ""}}]})]
            return []
        if kind == "response.output_text.delta":
            return [self._chunk({"content": data.get("delta", "")})]
        if kind == "response.function_call_arguments.delta":
            return [self._chunk({"tool_calls": [{"index": self.calls.get(where, 0),
                                                 "function": {"arguments": data.get(
                                                     "delta", "")}}]})]
        return []

    def _end(self, kind: str, data: JsonObject) -> list[JsonObject]:
        self.done = True
        response = as_object(data.get("response"))
        usage = as_object(response.get("usage"))
        prompt, output = count_of(usage.get("input_tokens")), count_of(usage.get("output_tokens"))
        if usage and (prompt, output) != (usage.get("input_tokens"), usage.get("output_tokens")):
            _odd(self.oddities, "usage")
            response = {**response, "usage": {**usage, "input_tokens": prompt,
                                              "output_tokens": output,
                                              "total_tokens": prompt + output}}
        items = response.get("output")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            # The template a valid reply is written from: only whole items in a list.
            _odd(self.oddities, "response.output")
            items = items if isinstance(items, list) else []
            response = {**response, "output": [i for i in items if isinstance(i, dict)]}
        self.skeleton = response  # its output items' ids are kept for valid calls
        finish = "length" if kind == "response.incomplete" else (
            "tool_calls" if self.calls else "stop")
        return [{**self._chunk({}, finish), "usage": {
            "prompt_tokens": prompt, "completion_tokens": output,
            "total_tokens": prompt + output}}]

    def _chunk(self, delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {"id": self.skeleton.get("id"), "model": self.skeleton.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
