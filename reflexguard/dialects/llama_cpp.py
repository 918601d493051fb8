"""Chat Completions requests rewritten into the form llama-cpp-python's server accepts.

Nothing here does I/O. The embedded model's server validates every request with the
pydantic models of `llama_cpp/server/types.py` and `llama_cpp/llama_types.py` (read at
0.3.36) and answers 500 to a body the OpenAI API accepts but those models refuse. What
agents send that they refuse, and what each becomes here:

- `content: null` on an assistant message (LangChain and the Agents SDK on a tool-call
  turn; the assistant message's `content` is `NotRequired[str]`, not optional) -> `""`;
- `content` as a list of parts on a system, assistant or tool message (only a user
  message may carry parts) -> their text, joined by newlines;
- the `developer` role (not in the union of message types) -> `system`;
- `null` for an assistant message's `tool_calls` or `function_call`, a tool's
  `description`, or a top-level field that is not Optional there (`temperature`, `top_p`,
  `stream`, ...): OpenAI reads null as "not given" -> the key is left out;
- a function tool without `parameters` (required there) -> an empty object schema;
- `response_format: {"type": "json_schema", ...}` (only `text` and `json_object` are
  accepted) -> `{"type": "json_object", "schema": ...}`, llama-cpp-python's own form;
- `max_completion_tokens` (OpenAI's current name; ignored there, so the answer would
  be unbounded) -> `max_tokens`, unless `max_tokens` is given;
- a history tool call without `type` -> `"type": "function"`, the only type there is;
- `tool_choice: {"type": "allowed_tools", ...}` (not in that union) -> its `mode`, with
  `tools` narrowed to the allowed ones, so the model still sees only those.

Left as they are, because no rewrite keeps their meaning: user content parts other than
text and images (`input_audio`, `file`), and tools of a type other than `function`.

Fields it does not know (`parallel_tool_calls`, `stream_options`, `store`, `metadata`,
a tool's `strict`, a message's `name`, ...) it ignores rather than refuses, so they are
sent as they are. The caller's body is never mutated: what changes is copied.
"""

from __future__ import annotations

from typing import Any

from reflexguard.core.model import JsonObject

# Top-level fields llama-cpp-python types without Optional: null is refused there.
NOT_NULLABLE = ("temperature", "top_p", "min_p", "stream", "min_tokens", "top_k",
                "repeat_penalty", "mirostat_mode", "mirostat_tau", "mirostat_eta")
# The roles whose `content` must be a string (or null) there; user parts are accepted.
TEXT_ONLY_ROLES = ("system", "assistant", "tool", "function")
EMPTY_PARAMETERS: JsonObject = {"type": "object", "properties": {}}

# What changed, by kind: the kind names the fallback counted (`llama_cpp_<kind>`), the
# list where in the body it changed.
Changes = dict[str, list[str]]


def _parts_text(parts: list[Any]) -> str:
    """The text of content parts: `text` parts, and an assistant's `refusal` parts."""
    texts = [part.get("text") if part.get("type", "text") == "text" else part.get("refusal")
             for part in parts if isinstance(part, dict)]
    return "\n".join(text for text in texts if isinstance(text, str))


def _message(message: Any, where: str, changes: Changes) -> Any:
    if not isinstance(message, dict):
        return message
    fixed = dict(message)
    if fixed.get("role") == "developer":
        fixed["role"] = "system"
        changes.setdefault("developer_role", []).append(f"{where}.role")
    role = fixed.get("role")
    if role in TEXT_ONLY_ROLES and isinstance(fixed.get("content"), list):
        fixed["content"] = _parts_text(fixed["content"])
        changes.setdefault("content_parts", []).append(f"{where}.content")
    if role == "assistant":
        if "content" in fixed and fixed["content"] is None:
            fixed["content"] = ""
            changes.setdefault("null_content", []).append(f"{where}.content")
        for key in ("tool_calls", "function_call"):
            if key in fixed and fixed[key] is None:
                del fixed[key]
                changes.setdefault("null_field", []).append(f"{where}.{key}")
        if isinstance(fixed.get("tool_calls"), list):
            fixed["tool_calls"] = [_typed_call(call, f"{where}.tool_calls[{i}]", changes)
                                   for i, call in enumerate(fixed["tool_calls"])]
    return fixed if fixed != message else message


def _typed_call(call: Any, where: str, changes: Changes) -> Any:
    if not isinstance(call, dict) or "type" in call:
        return call
    changes.setdefault("tool_call_type", []).append(f"{where}.type")
    return {**call, "type": "function"}


def _allowed_names(choice: JsonObject) -> set[str]:
    allowed = choice.get("allowed_tools")
    listed = allowed.get("tools") if isinstance(allowed, dict) else None
    names: set[str] = set()
    for tool in listed if isinstance(listed, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else (
            tool.get("name") if isinstance(tool, dict) else None)
        if isinstance(name, str):
            names.add(name)
    return names


def _allowed_tools(fixed: JsonObject, changes: Changes) -> None:
    """`allowed_tools` as llama-cpp-python can take it: the mode, over the allowed tools."""
    choice = fixed.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return
    allowed = choice.get("allowed_tools")
    mode = allowed.get("mode") if isinstance(allowed, dict) else None
    fixed["tool_choice"] = mode if mode in ("auto", "required") else "auto"
    changes.setdefault("allowed_tools_choice", []).append("tool_choice")
    names = _allowed_names(choice)
    tools = fixed.get("tools")
    if names and isinstance(tools, list):
        fixed["tools"] = [t for t in tools if not isinstance(t, dict)
                          or not isinstance(t.get("function"), dict)
                          or t["function"].get("name") in names]


def _tool(tool: Any, where: str, changes: Changes) -> Any:
    if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
        return tool
    function = dict(tool["function"])
    if function.get("parameters") is None:
        function["parameters"] = dict(EMPTY_PARAMETERS)
        changes.setdefault("tool_parameters", []).append(f"{where}.function.parameters")
    if "description" in function and function["description"] is None:
        del function["description"]
        changes.setdefault("null_field", []).append(f"{where}.function.description")
    return tool if function == tool["function"] else {**tool, "function": function}


def _response_format(value: Any, changes: Changes) -> Any:
    if not isinstance(value, dict) or value.get("type") != "json_schema":
        return value
    spec = value.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    changes.setdefault("json_schema_format", []).append("response_format")
    if isinstance(schema, dict):
        return {"type": "json_object", "schema": schema}
    return {"type": "json_object"}  # a json_schema without a schema: any JSON object


def normalised(body: JsonObject) -> tuple[JsonObject, Changes]:
    """`body` as llama-cpp-python's server accepts it, and what had to change (empty:
    `body` itself is returned)."""
    changes: Changes = {}
    fixed = dict(body)
    for key in NOT_NULLABLE:
        if key in fixed and fixed[key] is None:
            del fixed[key]
            changes.setdefault("null_field", []).append(key)
    messages = fixed.get("messages")
    if isinstance(messages, list):
        fixed["messages"] = [_message(m, f"messages[{i}]", changes)
                             for i, m in enumerate(messages)]
    tools = fixed.get("tools")
    if isinstance(tools, list):
        fixed["tools"] = [_tool(t, f"tools[{i}]", changes) for i, t in enumerate(tools)]
    _allowed_tools(fixed, changes)
    if "response_format" in fixed:
        fixed["response_format"] = _response_format(fixed["response_format"], changes)
    if "max_completion_tokens" in fixed:
        limit = fixed.pop("max_completion_tokens")
        if fixed.get("max_tokens") is None and limit is not None:
            fixed["max_tokens"] = limit
            changes.setdefault("max_completion_tokens", []).append("max_completion_tokens")
    return (fixed, changes) if changes else (body, changes)
