"""Choose llama-cpp-python's build flags for this machine, and the wheel-cache key.

Run by scripts/setup.sh with the system Python (no third-party imports). Prints shell
assignments: LLAMA_CMAKE_ARGS, LLAMA_BUILD_KEY, LLAMA_BUILD_REASON.

Why a probe and not -march=native: on the Intel machine kind, cpuid advertises AMX, but a
process that runs `tilezero` dies with SIGILL. -march=native (GGML_NATIVE=ON) and
llama.cpp's runtime dispatch (GGML_CPU_ALL_VARIANTS) both trust cpuid, so both pick AMX
there. The baseline is x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2), which every machine of
this workplace and any laptop from the last decade runs. AVX-512 is added only when a
probe program that executes AVX-512 instructions exits cleanly here; AMX is always off.
See docs/embedded.md for the measurements behind this.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"

# Everything we don't need in a Python wheel: tests, examples, tools, llama-server.
_TRIM = [
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
]
_BASELINE = [
    "-DGGML_NATIVE=OFF",
    "-DGGML_CPU_ALL_VARIANTS=OFF",
    "-DGGML_BACKEND_DL=OFF",
    "-DGGML_SSE42=ON",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
]
_AVX512_ON = ["-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON"]
_AVX512_OFF = ["-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF"]

# Executes one AVX-512F, one VNNI and one BF16 instruction; exits 0 only if all ran.
_AVX512_PROBE = r"""
#include <immintrin.h>
int main(void) {
    __m512i a = _mm512_set1_epi32(1);
    __m512i b = _mm512_add_epi32(a, a);
    b = _mm512_dpbusd_epi32(b, a, a);
    __m512 f = _mm512_set1_ps(1.0f);
    __m512bh h = _mm512_cvtne2ps_pbh(f, f);
    __m512 d = _mm512_dpbf16_ps(f, h, h);
    return (_mm512_reduce_add_epi32(b) == 0) + (int)_mm512_reduce_add_ps(d) * 0;
}
"""


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def avx512_runs() -> tuple[bool, str]:
    """Compile and run the probe; cpuid alone is not trusted."""
    needed = {"avx512f", "avx512_vnni", "avx512_bf16"}
    missing = needed - cpu_flags()
    if missing:
        return False, f"cpuinfo lacks {', '.join(sorted(missing))}"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp, "probe.c"), Path(tmp, "probe")
        src.write_text(_AVX512_PROBE)
        built = subprocess.run(
            ["gcc", "-O0", "-mavx512f", "-mavx512vnni", "-mavx512bf16", str(src), "-o", str(exe)],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            return False, "the compiler cannot build the AVX-512 probe"
        ran = subprocess.run([str(exe)], capture_output=True)
        if ran.returncode != 0:
            return False, f"the AVX-512 probe died here (exit {ran.returncode})"
    return True, "an AVX-512 probe (F, VNNI, BF16) ran here"


def choose() -> tuple[list[str], str]:
    choice = os.environ.get("REFLEXGUARD_LLAMA_CPU", "auto")
    if platform.machine() not in ("x86_64", "AMD64"):
        return _TRIM + ["-DGGML_NATIVE=OFF"], f"{platform.machine()}: llama.cpp's defaults"
    if choice == "avx2":
        return _TRIM + _BASELINE + _AVX512_OFF, "x86-64-v3 (AVX2), REFLEXGUARD_LLAMA_CPU=avx2"
    ok, why = avx512_runs()
    if choice == "avx512" or (choice == "auto" and ok):
        return _TRIM + _BASELINE + _AVX512_ON, f"x86-64-v3 + AVX-512, no AMX: {why}"
    return _TRIM + _BASELINE + _AVX512_OFF, f"x86-64-v3 (AVX2, no AVX-512): {why}"


def build_key(cmake_args: list[str]) -> str:
    material = "\n".join([f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", platform.machine()])
    material += "\n" + "\n".join(sorted(cmake_args))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def main() -> int:
    args, reason = choose()
    key = build_key(args)
    print(f"LLAMA_VERSION='{LLAMA_CPP_PYTHON_VERSION}'")
    print(f"LLAMA_CMAKE_ARGS='{' '.join(args)}'")
    print(f"LLAMA_BUILD_KEY='{LLAMA_CPP_PYTHON_VERSION}-{key}'")
    print(f"LLAMA_BUILD_REASON='{reason}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
