"""`reflexguard model doctor` without models, and with a variant whose probe dies.

The real-model run (two variants, tokens/s) is part of scripts/test.sh.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reflexguard.embedded import doctor, model_store

SIGILL_SELF = ("import os, resource, signal; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); "
               "os.kill(os.getpid(), signal.SIGILL)")


def test_no_model_cached_exits_1_and_says_to_fetch(tmp_path: Path) -> None:
    env = {**os.environ, "REFLEXGUARD_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "reflexguard", "model", "doctor"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert "cpu flags" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("reflexguard: doctor: no model is cached")
    assert "reflexguard model fetch" in last


def test_a_probe_killed_by_sigill_is_reported_by_name() -> None:
    probe = doctor.run_command([sys.executable, "-c", SIGILL_SELF])
    assert probe.record is None and probe.failure is not None
    assert probe.failure.startswith("died with SIGILL")
    assert "CPU instructions this machine cannot run" in probe.failure


def test_a_dying_variant_fails_the_doctor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cached = model_store.CachedModel("Q4_K_M", "Q4_K_M as shipped", tmp_path / "m.gguf", 1, "ab")
    monkeypatch.setattr(model_store, "listing", lambda: [cached])
    real = doctor.run_probe

    def probe(*args: str) -> doctor.Probe:
        if args[0] == "speed":
            return doctor.run_command([sys.executable, "-c", SIGILL_SELF])
        return real(*args)

    monkeypatch.setattr(doctor, "run_probe", probe)
    assert doctor.run() == 1
    out, err = capsys.readouterr()
    assert "Q4_K_M" in out and "BROKEN: died with SIGILL" in out
    assert err.strip().startswith("reflexguard: doctor: Q4_K_M does not load and decode: "
                                  "died with SIGILL")


def test_llama_cpp_not_importable_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(doctor, "run_probe", lambda *args: doctor.Probe(
        None, "llama_cpp is not importable: No module named 'llama_cpp'"))
    assert doctor.run() == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "importing llama_cpp failed" in err[0] and "scripts/setup.sh" in err[0]


def test_build_features_are_checked_against_cpu_flags() -> None:
    from reflexguard.embedded import cpu

    info = cpu.parse_system_info("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | "
                                 "AMX_INT8 = 1 | LLAMAFILE = 1 | ")
    assert cpu.built_features(info) == ["AVX", "AVX2", "AVX512", "AMX_INT8"]
    assert cpu.mismatches(info, {"avx", "avx2", "fma"}) == ["AVX512", "AMX_INT8"]
    assert cpu.relevant_flags({"sse4_2", "avx2", "avx", "amx_tile", "avx512f"}) == [
        "avx", "avx2", "amx_tile", "avx512f"]
