"""The call paths' hooks into OpenTelemetry (docs/observability.md), one call per point.

This module imports no OpenTelemetry: with `otel` off (the default) `hooks` stays the
no-op below, so the fast path pays a method call that returns at once and nothing is
imported. `instrument` (the proxy, from build_app) and `for_library` (the Python API)
swap in reflexguard.ops.otel's hooks when the setting is on.

The points, each one line in the shared files:
  hooks.begin(call)             a guarded request's call object exists (http/call.py)
  hooks.attempt(call, attempt)  the ladder read an attempt (on_attempt, both edges)
  hooks.clean(call, body)       a first answer whose calls are all ok, taken as it came
  hooks.decided(call, result)   the ladder's decision (finish / observe)
The upstream client and the server's middleware are wrapped by `instrument` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from reflexguard.ops.config import Settings


class NoTracing:
    """What every hook does with `otel` off: nothing."""

    enabled = False

    def begin(self, call: Any) -> None:
        return None

    def attempt(self, call: Any, attempt: Any) -> None:
        return None

    def clean(self, call: Any, body: bytes) -> None:
        return None

    def decided(self, call: Any, result: Any) -> None:
        return None


OFF = NoTracing()
# The process's hooks: one tracer provider per process (each worker sets up its own).
hooks: Any = OFF


def missing_otel(exc: ImportError) -> str:
    """The one line `otel: on` gives where OpenTelemetry is not installed (a CLI user sees
    it as the error, not a traceback)."""
    return (f"otel is on but OpenTelemetry is not installed ({exc.name or exc}): install "
            "it with `pip install 'reflexguard[otel]'`, or turn otel off")


def instrument(app: web.Application, upstream: Any, settings: Settings) -> None:
    """With `otel` on: a SERVER span around every request, a CLIENT span around every
    upstream request (its traceparent sent upstream), exported over OTLP by this
    process's own providers (flushed when the app stops). Off: nothing at all."""
    global hooks
    if not settings.otel:
        return
    try:
        from reflexguard.ops.otel_proxy import proxy_hooks
    except ImportError as exc:
        raise ValueError(missing_otel(exc)) from None

    hooks = proxy_hooks(app, upstream)

    async def stopped(_: web.Application) -> None:
        reset()

    app.on_cleanup.append(stopped)


def for_library(settings: Settings) -> None:
    """The Python API with `otel` on: spans through the application's own (global)
    providers, under its current span; reflexguard sets up no exporter in someone
    else's process."""
    global hooks
    if not settings.otel or hooks.enabled:
        return
    try:
        from reflexguard.ops.otel import library_hooks
    except ImportError as exc:
        raise ValueError(missing_otel(exc)) from None

    hooks = library_hooks()


def reset() -> None:
    """Back to no tracing (tests, and an app's cleanup)."""
    global hooks
    hooks = OFF
