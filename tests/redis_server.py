"""A real `redis-server` on loopback for the session-state tests, and a listener that
accepts connections and never answers (Redis "slow")."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from reflexguard.ops.loopback import free_port

READY_SECONDS = 10.0  # a hang guard for a stuck start, not a measured figure


class RedisServer:
    """`redis-server --port P --save '' --appendonly no`, stoppable and restartable on the
    same port (to prove reconnecting)."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            # Not a skip: CI must prove the Redis integration, so a missing server fails.
            pytest.fail("redis-server is not installed: run scripts/setup.sh (it installs "
                        "Debian's redis-server) or `apt-get install -y redis-server`",
                        pytrace=False)
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_SECONDS
        while not self._pong():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server did not start on port {self.port}", pytrace=False)
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=READY_SECONDS)
        self.process = None

    def command(self, *args: str) -> bytes:
        """One raw RESP command, for checks that must not go through the client under test."""
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            parts.append(f"${len(arg.encode())}\r\n".encode() + arg.encode() + b"\r\n")
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(b"".join(parts))
            return conn.recv(65536)

    def _pong(self) -> bool:
        try:
            return self.command("PING").startswith(b"+PONG")
        except OSError:
            return False


class SilentServer:
    """Listens and lets the kernel complete every handshake, but never reads or answers:
    a Redis that is up and hopelessly slow."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(128)
        self.port = int(self.socket.getsockname()[1])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.socket.close()
