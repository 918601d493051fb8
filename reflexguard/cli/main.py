"""The `reflexguard` command line. Mistakes are one-line messages and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from reflexguard.cli.errors import EXIT_USAGE, CliError
from reflexguard.core.repair import ConstrainedMode
from reflexguard.ops.oneline import OneLineParser


def _serve_parser(commands: Any) -> None:
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


def _model_parser(commands: Any) -> None:
    model = commands.add_parser("model", help="the embedded quantized model")
    actions = model.add_subparsers(dest="action", required=True)
    actions.add_parser("fetch", help="download and verify the Q4_K_M GGUF")
    quantize = actions.add_parser("quantize", help="make a lower-precision variant")
    quantize.add_argument("--to", required=True, dest="to")
    actions.add_parser("list", help="show cached variants")
    actions.add_parser("doctor", help="check the CPU, the llama.cpp build and that every "
                       "cached variant loads and decodes (in a subprocess), with tokens/s")


def parser() -> argparse.ArgumentParser:
    root = OneLineParser(prog="reflexguard", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _model_parser(commands)
    return root


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given on the command line that name a setting (a flag's `dest` is the
    setting's name), so a new setting needs only its `add_argument`."""
    from reflexguard.ops.config import Settings

    return {k: v for k, v in vars(args).items()
            if k in Settings.model_fields and v is not None}


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "settings"
    return f"invalid setting {where}: {first['msg']}"


def run(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "serve":
        from reflexguard.cli.serve import serve
        from reflexguard.ops.config import load_settings

        try:
            settings = load_settings(_flags(args), args.config or _env_config())
        except ValidationError as exc:
            raise CliError(_describe(exc)) from None
        except (FileNotFoundError, ValueError) as exc:
            raise CliError(str(exc).splitlines()[0]) from None
        return serve(settings)
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
