"""`reflexguard model doctor`: does the embedded runtime work on this machine, and how fast?

This is an I/O edge. It reads the CPU's flags, the installed llama.cpp build's features
and flags, and then, for every cached variant, loads it and decodes in a subprocess
(probe.py), so that a build this CPU cannot run ends with a named signal in the report
instead of killing the doctor. Exit 0 when everything works; otherwise 1 and one last line
that says what is broken and what to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflexguard.embedded import cpu, model_store
from reflexguard.embedded.exits import describe_exit
from reflexguard.ops.install import checkout_root, install_runtime, rebuild_runtime

PROBE_TIMEOUT = 600.0  # load + 300 prompt tokens + 32 decodes; minutes only on a slow CPU
BUILD_KEY_FILE = "llama-build-key"  # written into the venv by scripts/setup.sh


@dataclass
class Probe:
    record: dict[str, Any] | None  # the probe's JSON line, when it finished
    failure: str | None  # why not, in one line


def run_probe(*args: str) -> Probe:
    return run_command([sys.executable, "-m", "reflexguard.embedded.probe", *args])


def run_command(command: list[str]) -> Probe:
    """Run a probe; its JSON line, or how it failed (a signal by name) in one line."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Probe(None, f"no answer within {PROBE_TIMEOUT:.0f} s")
    lines = done.stdout.strip().splitlines()
    record: dict[str, Any] | None = None
    if lines:
        try:
            record = json.loads(lines[-1])
        except ValueError:
            record = None
    if done.returncode == 0 and record is not None and "error" not in record:
        return Probe(record, None)
    if record is not None and "error" in record:
        return Probe(None, str(record["error"]))
    reason = describe_exit(done.returncode)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
    return Probe(None, f"died with {reason.what}: {reason.cause} (last output: {tail})")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def build_key() -> str | None:
    try:
        return Path(sys.prefix, BUILD_KEY_FILE).read_text().strip() or None
    except OSError:
        return None


def cmake_args(key: str | None) -> tuple[str | None, Path | None]:
    if key is None:
        return None, None
    path = model_store.home() / "wheels" / f"llama-cpp-python-{key}" / "CMAKE_ARGS"
    try:
        return path.read_text().strip(), path
    except OSError:
        return None, path


def _line(label: str, value: str) -> None:
    print(f"  {label:<12} {value}")


def _cpu_report(text: str) -> set[str]:
    flags = cpu.flags_from_cpuinfo(text)
    shown = cpu.relevant_flags(flags)
    wide = [f for f in shown if f.startswith(("avx512", "amx"))]
    _line("cpu", f"{cpu.model_name_from_cpuinfo(text)} ({os.cpu_count()} logical cores)")
    _line("cpu flags", " ".join(shown) + ("" if wide else "  (no avx512*, no amx*)")
          if shown else "none of avx/avx2/fma/f16c/bmi2/avx512*/amx* (or no /proc/cpuinfo)")
    return flags


def _unkeyed() -> str:
    """Why no build key is recorded: only setup's keyed build writes one; pip's own build
    of the `embedded` extra has none to write."""
    if checkout_root() is not None:
        return "not installed by scripts/setup.sh"
    return "llama-cpp-python built by pip, not by a checkout's scripts/setup.sh"


def _build_report(flags: set[str]) -> str | None:
    """Prints the build; returns a problem when llama_cpp cannot even be imported."""
    key = build_key()
    args, path = cmake_args(key)
    _line("build key", f"{key} ({Path(sys.prefix, BUILD_KEY_FILE)})" if key else
          f"unknown: no {Path(sys.prefix, BUILD_KEY_FILE)} ({_unkeyed()})")
    if args is not None:
        _line("cmake args", f"{args} ({path})")
    elif path is not None:
        _line("cmake args", f"not found at {path} (the wheel cache was moved or cleared)")
    info = run_probe("info")
    if info.record is None:
        return f"importing llama_cpp failed: {info.failure}; {install_runtime()}"
    system = str(info.record["system_info"]).strip()
    _line("llama.cpp", f"llama-cpp-python {info.record['version']}; {system}")
    features = cpu.parse_system_info(system)
    _line("build uses", " ".join(cpu.built_features(features)) or "no x86 SIMD features")
    for name in cpu.mismatches(features, flags):
        _line("warning", f"the build uses {name}, which this CPU does not report "
                         f"({cpu.BUILT_TO_CPUINFO[name]}): expect SIGILL; "
                         f"{rebuild_runtime()}")
    return None


def _variants_report() -> str | None:
    cached = [row for row in model_store.listing() if row.size]
    if not cached:
        _line("variants", f"none cached in {model_store.models_dir()}")
        return "no model is cached: run `reflexguard model fetch` (and optionally " \
               "`reflexguard model quantize --to Q2_K`)"
    threads = str(os.cpu_count() or 1)
    problem = None
    for row in cached:
        result = run_probe("speed", str(row.path), threads)
        if result.record is None:
            _line(row.variant, f"BROKEN: {result.failure}")
            problem = problem or f"{row.variant} does not load and decode: {result.failure}"
            continue
        r = result.record
        _line(row.variant, f"ok: load {r['load_s']:.1f} s, prompt {r['prompt_tok_s']:.1f} tok/s "
                           f"({r['prompt_tokens']} tokens), generation "
                           f"{r['generation_tok_s']:.1f} tok/s ({r['generated_tokens']} tokens, "
                           f"temperature 0), {r['threads']} threads")
    return problem


def run() -> int:
    print("reflexguard model doctor")
    flags = _cpu_report(_cpuinfo())
    problem = _build_report(flags)
    if problem is None:
        problem = _variants_report()
    if problem is not None:
        print(f"reflexguard: doctor: {problem}", file=sys.stderr)
        return 1
    print("doctor: the embedded runtime loads and decodes every cached variant here")
    return 0
