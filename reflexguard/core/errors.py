"""OpenAI-format error bodies. Nothing here does I/O."""

from __future__ import annotations

import orjson

TYPE_BY_STATUS = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> bytes:
    error = {
        "message": message,
        "type": TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request"),
        "param": param,
        "code": code,
    }
    return orjson.dumps({"error": error})


class BadRequest(ValueError):
    """A client mistake, answered with an OpenAI-format error and never a stack trace."""

    def __init__(
        self, message: str, status: int = 400, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return error_body(self.status, str(self), self.param, self.code)
