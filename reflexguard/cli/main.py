"""The `reflexguard` command line. Mistakes are one-line messages and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from reflexguard.cli.errors import EXIT_USAGE, CliError
from reflexguard.core.repair import ConstrainedMode
from reflexguard.ops.oneline import OneLineParser


def _serve_parser(commands: Any, setting_flags: bool = True) -> None:
    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--upstream", help="base URL of an OpenAI-compatible server, e.g. "
                       "http://127.0.0.1:8000/v1 (default: the embedded model)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--repair", choices=["on", "off"], help="off = observe mode")
    serve.add_argument("--max-repairs", type=int, dest="max_repairs")
    serve.add_argument("--events", type=Path, help="append one JSON line per attempt here")
    serve.add_argument("--config", type=Path, help="YAML settings file")
    serve.add_argument("--tool-call-format", choices=["openai", "content"],
                       dest="tool_call_format")
    serve.add_argument("--constrained-retry", dest="constrained_retry",
                       choices=get_args(ConstrainedMode))
    serve.add_argument("--upstream-dialects", dest="upstream_dialects",
                       help="dialects the upstream serves itself, a comma list of chat, "
                       "messages, responses (default all; others are translated to chat)")
    serve.add_argument("--model-variant", dest="model_variant",
                       help="embedded model variant (Q4_K_M, Q3_K_S, Q2_K)")
    serve.add_argument("--error-budget", type=int, dest="error_budget",
                       help="the agents' error budget K when a request sends no "
                       "x-reflexguard-error-budget header (docs/repair.md)")
    serve.add_argument("--tool-error-pattern", dest="tool_error_pattern",
                       help="regex: a chat tool message reporting a failed call (^Error:)")
    serve.add_argument("--responses-error-pattern", dest="responses_error_pattern",
                       help="regex: a Responses function_call_output reporting a failure")
    serve.add_argument("--workers", type=int, help="worker processes on one port "
                       "(SO_REUSEPORT; default 1 = one process, no supervisor); needs "
                       "--upstream")
    serve.add_argument("--worker-grace", type=float, dest="worker_grace",
                       help="seconds workers may finish in-flight requests on SIGTERM "
                       "(default 30)")
    serve.add_argument("--state", help="where sessions live: memory (default) or "
                       "redis://HOST:PORT/DB (also rediss://, unix://), shared by every "
                       "worker and replica")
    serve.add_argument("--state-timeout", type=float, dest="state_timeout",
                       help="seconds a request may wait on the session store (default 0.05)")
    serve.add_argument("--session-ttl", type=float, dest="session_ttl",
                       help="seconds a session is kept after it was last seen (default 86400)")
    serve.add_argument("--margins", choices=["on", "off"],
                       help="ask the upstream for logprobs and record each call's logit "
                       "margins (docs/screen.md)")
    serve.add_argument("--margin-threshold", type=float, dest="margin_threshold",
                       help="a tool name's margin below this many nats is thin")
    serve.add_argument("--request-timeout", type=float, dest="request_timeout",
                       help="seconds for one client request, every attempt of the repair "
                       "ladder included (default 900)")
    if setting_flags:
        _setting_flags(serve)


# Help for the settings whose field has no description (docs/config.md has them all).
_HELP = {
    "upstream_connect_timeout": "seconds to connect to the upstream (default 10)",
    "upstream_max_connections": "the upstream connection pool's size (default 256)",
    "upstream_api_key": "sent upstream as a bearer token; prefer REFLEXGUARD_UPSTREAM_API_KEY "
                        "(a flag is visible to every user in the process list)",
    "admin_token": "bearer token for /metrics and /reflexguard/*; prefer "
                   "REFLEXGUARD_ADMIN_TOKEN (a flag is visible in the process list)",
    "json_repair": "deterministic JSON repair before re-asking",
    "snap_names": "snap near-miss tool names to the closest declared one",
    "snap_threshold": "the rapidfuzz ratio (0-100) a name must reach to be snapped",
    "on_exhausted": "what the agent gets when repair gives up",
    "grounding": "check identifier-like arguments against the conversation",
    "grounding_pattern": "regex over argument names that grounding checks",
    "grounding_include_system": "let the system prompt ground values",
    "max_body_bytes": "larger request bodies get 413 (default 32 MiB)",
    "max_answer_bytes": "a larger upstream answer is closed with 502 (default 64 MiB)",
    "max_json_depth": "request bodies nested deeper get 400 (default 100)",
    "log_level": "the log's level",
    "model_ctx": "the embedded model's context, in tokens (default 8192)",
    "model_threads": "the embedded model's threads (default: every core)",
}


def _setting_flags(serve: argparse.ArgumentParser) -> None:
    """A flag for every setting the flags above do not cover, made from its field: every
    setting has a flag, a new one included (tests/cli/test_config_errors.py checks)."""
    from reflexguard.ops.config import Settings

    taken = {action.dest for action in serve._actions}
    for name, field in Settings.model_fields.items():
        if name in taken:
            continue
        options: dict[str, Any] = {"dest": name,
                                   "help": field.description or _HELP.get(name)}
        annotation = field.annotation
        if annotation is bool:
            options["choices"] = ["on", "off"]
        elif get_origin(annotation) is Literal:
            options["choices"] = list(get_args(annotation))
        elif annotation in (int, float):
            options["type"] = annotation
        serve.add_argument(f"--{name.replace('_', '-')}", **options)


def _model_parser(commands: Any) -> None:
    model = commands.add_parser("model", help="the embedded quantized model")
    actions = model.add_subparsers(dest="action", required=True)
    actions.add_parser("fetch", help="download and verify the Q4_K_M GGUF")
    quantize = actions.add_parser("quantize", help="make a lower-precision variant")
    quantize.add_argument("--to", required=True, dest="to")
    actions.add_parser("list", help="show cached variants")
    actions.add_parser("doctor", help="check the CPU, the llama.cpp build and that every "
                       "cached variant loads and decodes (in a subprocess), with tokens/s")


def _screen_parser(commands: Any) -> None:
    from reflexguard.cli.screen import add_screen_parser

    add_screen_parser(commands)


def installed_version() -> str:
    """The installed distribution's version (what pip and uv report); the package's own
    where none is installed, as in a checkout run through PYTHONPATH alone."""
    from importlib import metadata

    try:
        return metadata.version("reflexguard")
    except metadata.PackageNotFoundError:
        import reflexguard

        return reflexguard.__version__


class _Version(argparse.Action):
    """`--version`, read only when asked for: importlib.metadata is not free, and the
    parser is built on every run."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog} {installed_version()}")
        parser.exit()


def parser(setting_flags: bool = True) -> argparse.ArgumentParser:
    """The command line. `setting_flags=False` leaves out the flags made from the settings'
    fields, which import the settings (0.6 s): only `serve` reads them."""
    root = OneLineParser(prog="reflexguard", description=__doc__)
    root.add_argument("--version", action=_Version)
    commands = root.add_subparsers(dest="command", required=True)
    _serve_parser(commands, setting_flags)
    _model_parser(commands)
    _screen_parser(commands)
    return root


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given on the command line that name a setting (a flag's `dest` is the
    setting's name), so a new setting needs only its `add_argument`."""
    from reflexguard.ops.config import Settings

    return {k: v for k, v in vars(args).items()
            if k in Settings.model_fields and v is not None}


def run(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser(setting_flags=argv[:1] == ["serve"]).parse_args(argv)
    if args.command == "serve":
        from reflexguard.ops.config import load_settings

        try:  # ConfigError: one line naming the flag, variable or file and key
            settings = load_settings(_flags(args), args.config or _env_config())
        except ValueError as exc:
            raise CliError(str(exc).splitlines()[0]) from None
        if settings.workers > 1:
            # Before cli.serve imports prometheus_client: see cli/workers.py.
            from reflexguard.cli.workers import serve_workers

            return serve_workers(settings)
        from reflexguard.cli.serve import serve

        return serve(settings)
    if args.command == "screen":
        from reflexguard.cli.screen import run_screen

        return run_screen(args)
    from reflexguard.cli.model import run_model_command

    return run_model_command(args)


def _env_config() -> Path | None:
    import os

    value = os.environ.get("REFLEXGUARD_CONFIG")
    return Path(value) if value else None


def main(argv: Sequence[str] | None = None) -> None:
    try:
        code = run(argv)
    except CliError as exc:
        print(f"reflexguard: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
