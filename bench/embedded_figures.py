"""`python -m bench.embedded_figures`: the repair ladder on the embedded model, per variant.

For each variant (Q4_K_M as shipped; Q3_K_S and Q2_K requantized from it) the 34 fixed
tool prompts run through reflexguard three times: repair off (observe), re-ask only, and
re-ask with a constrained last attempt (llama.cpp `response_format` with a JSON schema).
Printed per arm: the channels of the first answers, the share of final answers that are
valid calls, and the extra upstream calls repair cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.figures.embedded_run import RunResult, run_prompts
from reflexguard.core.channels import Channel
from reflexguard.core.completion import choices_of, reply_of
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply
from reflexguard.embedded.child import model_server
from reflexguard.embedded.variants import VARIANTS

ARMS: dict[str, dict[str, Any]] = {
    "off": {"repair": False},
    "re-ask": {"max_repairs": 2, "constrained_retry": "off"},
    "re-ask+constrained": {"max_repairs": 2, "constrained_retry": "response_format"},
}


def summarise(run: RunResult) -> dict[str, Any]:
    first: Counter[str] = Counter()
    for event in run.events:
        if event["event"] == "attempt" and event["attempt"] == 1:
            first.update(call["channel"] for call in event["calls"])
    cache = ToolSetCache()
    valid = sum(
        validate_reply(reply_of(choices_of(r.answer)[0]),
                       CallRules(toolset=cache.get(r.sent["tools"]))).valid
        for r in run.results
    )
    upstream = sum(len(r.exchanges) for r in run.results)
    return {"prompts": len(run.results), "first_answer_channels": dict(first),
            "valid_final": valid, "upstream_calls": upstream,
            "extra_calls": upstream - len(run.results)}


async def measure(variants: list[str], limit: int | None) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}
    for name in variants:
        with model_server(name, n_ctx=4096) as server, \
                tempfile.TemporaryDirectory() as scratch:
            figures[name] = {}
            for arm, settings in ARMS.items():
                run = await run_prompts(server.base_url, Path(scratch) / f"{arm}.jsonl",
                                        limit=limit, **settings)
                figures[name][arm] = summarise(run)
                print_row(name, arm, figures[name][arm])
    return figures


def print_row(variant: str, arm: str, row: dict[str, Any]) -> None:
    errors = {k: v for k, v in row["first_answer_channels"].items() if k != Channel.OK}
    listed = ", ".join(f"{k}={v}" for k, v in sorted(errors.items())) or "none"
    print(f"{variant:<7} {arm:<19} ok={row['first_answer_channels'].get('ok', 0):>2} "
          f"errors: {listed:<48} valid after: {row['valid_final']:>2}/{row['prompts']} "
          f"extra upstream calls: {row['extra_calls']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--limit", type=int, help="only the first N prompts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print("embedded model: Qwen2.5-Coder-0.5B-Instruct via llama-cpp-python on the CPU; "
          "34 fixed single-turn prompts, temperature 0")
    for name in args.variants:
        print(f"  {name}: {VARIANTS[name].label}")
    figures = asyncio.run(measure(args.variants, args.limit))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
