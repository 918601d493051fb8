"""/readyz with the embedded model: 503 with the reason until the child is ready, then 200."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.embedded.test_supervisor import supervised, wait_for

__all__ = ["supervised"]  # the fixture, shared with the supervisor's tests


async def test_readyz_follows_the_embedded_child(supervised: Callable[..., Any]) -> None:
    client, _ = await supervised("--start-delay", "1.5")
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 503, body
    assert body["status"] == "not_ready" and body["embedded"] == "starting"
    assert "still starting" in body["reason"]
    assert (await client.get("/livez")).status == 200  # the process serves meanwhile
    await wait_for(client, "ready")
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 200, body
    assert body["status"] == "ready" and body["upstream"].startswith("http://127.0.0.1:")
