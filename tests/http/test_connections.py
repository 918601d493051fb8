"""Connection bounds (issue 18, items 7 and 8), against `reflexguard serve` as shipped: a
real process on a real port, fed by raw sockets.

- a request head must arrive within `header_timeout`, its body within `body_timeout`;
- past the connection cap the oldest connection still waiting for a head is shed, and with
  none to shed the new one gets a counted 503;
- /healthz answers with the process's file limit nearly used (the cap sits below it);
- aiohttp's own protocol errors are JSON in the route's format, not text/plain.

The waits below are upper bounds on behaviour, not speed: each is many times the bound the
server applies, so a loaded machine does not fail them.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

SERVE = "import sys; from reflexguard.cli.main import main; main(sys.argv[1:])"
START_WITHIN = 60.0  # seconds for the process to import and listen, on a loaded machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    port: int
    process: subprocess.Popen[bytes]


def raw(port: int, request: bytes, timeout: float = 20.0) -> bytes:
    """One request on a fresh connection, read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        return data


def head_and_body(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = body.split(b"\r\n", 1)[1].rsplit(b"\r\n0\r\n", 1)[0]
    return int(lines[0].split(" ")[1]), headers, body


def serve(extra_env: dict[str, str], nofile: int | None = None) -> Iterator[Served]:
    port = free_port()
    env = {**os.environ, "REFLEXGUARD_LOG_LEVEL": "warning", **extra_env}

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--upstream", "http://127.0.0.1:9/v1",
         "--port", str(port)], env=env, preexec_fn=limit,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_WITHIN
    while True:
        try:
            if b" 200 " in raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\n\r\n", 5)[:20]:
                break
        except OSError:
            pass
        assert process.poll() is None, "reflexguard serve exited"
        assert time.monotonic() < deadline, "reflexguard serve did not start"
        time.sleep(0.2)
    try:
        yield Served(port, process)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def quick() -> Iterator[Served]:
    """Short read timeouts, so a test sees them act."""
    yield from serve({"REFLEXGUARD_HEADER_TIMEOUT": "1", "REFLEXGUARD_BODY_TIMEOUT": "1"})


def assert_json_error(data: bytes, status: int) -> dict[str, Any]:
    got, headers, body = head_and_body(data)
    assert got == status, data[:300]
    assert headers.get("content-type", "").startswith("application/json"), data[:300]
    error = json.loads(body)["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    return dict(error)


POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
PROTOCOL_ERRORS = {
    "CL+TE": (POST + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400),
    "duplicated Content-Length": (POST + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
                                  400),
    "500 headers": (POST + b"".join(b"X-H%d: v\r\n" % n for n in range(500))
                    + b"Content-Length: 2\r\n\r\n{}", 400),
    "100 KB header": (POST + b"X-Big: " + b"v" * 100_000 + b"\r\nContent-Length: 2\r\n\r\n{}",
                      400),
    "Expect: 999-x": (POST + b"Expect: 999-x\r\nContent-Length: 2\r\n\r\n{}", 417),
    "not HTTP": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\r\n\r\n", 400),
}


@pytest.mark.parametrize("label", list(PROTOCOL_ERRORS))
def test_a_protocol_error_is_an_openai_format_json_error(quick: Served, label: str) -> None:
    request, status = PROTOCOL_ERRORS[label]
    assert_json_error(raw(quick.port, request), status)


def test_a_protocol_error_on_messages_is_in_anthropics_format(quick: Served) -> None:
    request = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: 999-x\r\n"
               b"Content-Length: 2\r\n\r\n{}")
    _, _, body = head_and_body(raw(quick.port, request))
    parsed = json.loads(body)
    assert parsed["type"] == "error" and "message" in parsed["error"], parsed


def test_headers_trickled_byte_by_byte_are_cut_at_the_header_timeout(quick: Served) -> None:
    """One header byte every 0.2 s: closed with a 408 about a second in, not kept open."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", quick.port), timeout=30) as conn:
        data = b""
        for byte in request:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break  # closed while we were still sending: read what it said
            conn.settimeout(0.2)
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            data += chunk
            if not chunk or b"\r\n\r\n" in data:
                break
        conn.settimeout(30)
        while chunk := conn.recv(65536):
            data += chunk
    assert time.monotonic() - began < 30, "the connection was kept open"
    error = assert_json_error(data, 408)
    assert error["code"] == "request_timeout"


def test_a_later_head_on_a_kept_connection_has_its_own_header_timeout(quick: Served) -> None:
    """The head timer outlives a request (issue 23: one timer per connection, re-armed when
    it fires): a second head, begun after the first request's deadline would have fallen
    mid-way, is cut a whole header_timeout (1 s) after its own first byte, never sooner."""
    with socket.create_connection(("127.0.0.1", quick.port), timeout=30) as conn:
        conn.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b'"ok"' not in first:
            first += conn.recv(65536)
        time.sleep(0.6)  # the first head's deadline falls 0.4 s into the second head
        began = time.monotonic()
        conn.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        waited = time.monotonic() - began
    assert waited >= 0.9, f"cut {waited:.2f} s after the second head began"
    assert assert_json_error(data, 408)["code"] == "request_timeout"


def test_a_body_that_does_not_arrive_is_cut_at_the_body_timeout(quick: Served) -> None:
    request = POST + b"Content-Length: 1000\r\n\r\n{\"messages\": "
    error = assert_json_error(raw(quick.port, request, timeout=30), 408)
    assert error["code"] == "request_timeout"


def test_a_body_still_trickling_after_its_timeout_gets_one_answer(quick: Served) -> None:
    """Found by the fuzz suite: the 408 for a late body, then the body's later bytes, must
    not be taken for a new head (a second 408 on the same connection broke its framing)."""
    began = time.monotonic()
    data = b""
    with socket.create_connection(("127.0.0.1", quick.port), timeout=30) as conn:
        conn.sendall(POST + b"Content-Length: 1000\r\n\r\n{")
        while time.monotonic() - began < 4:
            try:
                conn.sendall(b" ")
            except OSError:
                break
            time.sleep(0.2)
        conn.settimeout(30)
        try:
            while chunk := conn.recv(65536):
                data += chunk
        except ConnectionError:
            pass
    assert data.count(b"HTTP/1.1 ") == 1, data[:600]
    assert_json_error(data, 408)


def metric(port: int, name: str, reason: str) -> float:
    _, _, body = head_and_body(raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                         b"Connection: close\r\n\r\n"))
    for line in body.decode().splitlines():
        if line.startswith(f'{name}_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


async def open_slow(port: int, count: int, head: bytes) -> list[asyncio.StreamWriter]:
    """`count` connections, each sent `head` and then left waiting."""
    writers = []
    for _ in range(count):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            continue
        writer.write(head)
        writers.append(writer)
    await asyncio.sleep(0.5)
    return writers


async def healthz(port: int) -> int:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 20)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return head_and_body(data)[0] if data else 0


async def test_healthz_answers_with_the_file_limit_nearly_used() -> None:
    """RLIMIT_NOFILE 256 and 300 connections trickling a header: the oldest waiting ones are
    shed (counted), /healthz is answered."""
    for served in serve({"REFLEXGUARD_HEADER_TIMEOUT": "60",
                         "REFLEXGUARD_UPSTREAM_MAX_CONNECTIONS": "32"}, nofile=256):
        writers = await open_slow(served.port, 300, b"GET /healthz HTTP/1.1\r\nX-Slow: a")
        try:
            assert await healthz(served.port) == 200
        finally:
            for writer in writers:
                writer.close()
        assert metric(served.port, "reflexguard_connections_refused", "shed_waiting") > 0


async def test_past_the_cap_with_none_to_shed_a_new_connection_gets_a_counted_503() -> None:
    """Eight connections each inside a request (a body still arriving): a ninth is refused
    with a JSON 503, and the refusal is counted."""
    for served in serve({"REFLEXGUARD_MAX_CLIENT_CONNECTIONS": "8",
                         "REFLEXGUARD_BODY_TIMEOUT": "60"}):
        busy = await open_slow(served.port, 8, POST + b"Content-Length: 1000\r\n\r\n{")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            data = await asyncio.wait_for(reader.read(), 20)
            writer.close()
            assert_json_error(data, 503)
        finally:
            for slow in busy:
                slow.close()
        await asyncio.sleep(0.5)
        assert metric(served.port, "reflexguard_connections_refused", "cap") >= 1


async def test_the_embedded_run_waits_as_long_as_reflexguard_may(
        fake: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9: the real-model suite's client (bench.figures.embedded_run) waits for an
    answer at least as long as reflexguard's own bound under the run's settings, not
    aiohttp's default 5 minutes."""
    import bench.figures.embedded_run as embedded_run

    _, server = fake
    made: list[Any] = []
    real = embedded_run.TestClient

    def recording(*args: Any, **kwargs: Any) -> Any:
        client = real(*args, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(embedded_run, "TestClient", recording)
    run = await embedded_run.run_prompts(str(server.make_url("/v1")), tmp_path / "ev.jsonl",
                                         limit=1)
    waited = made[0].session.timeout.total
    assert waited is not None and waited >= run.settings.request_timeout, waited
