"""What the CPU says it can run, and what the llama.cpp build was compiled to use.

Pure: the callers read /proc/cpuinfo and `llama_print_system_info()`; this module only
parses and compares. cpuid is not the whole truth (on the Intel machine kind it
advertises AMX, which dies with SIGILL), so a mismatch found here is a warning; the
doctor's subprocess probe, which really decodes, is the verdict.
"""

from __future__ import annotations

from collections.abc import Iterable

# The instruction sets llama.cpp's x86 CPU backend can be compiled for, as cpuinfo names them.
BASELINE = ("avx", "avx2", "fma", "f16c", "bmi2")

# llama_print_system_info()'s name for a feature -> the cpuinfo flag that must be present.
BUILT_TO_CPUINFO = {
    "AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2",
    "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8", "AMX_BF16": "amx_bf16",
    "AVX_VNNI": "avx_vnni",
}


def flags_from_cpuinfo(text: str) -> set[str]:
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def model_name_from_cpuinfo(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def relevant_flags(flags: Iterable[str]) -> list[str]:
    """The baseline flags present, then every avx512* and amx* flag, sorted."""
    present = set(flags)
    wide = sorted(f for f in present if f.startswith(("avx512", "amx")))
    return [f for f in BASELINE if f in present] + wide


def parse_system_info(text: str) -> dict[str, str]:
    """`CPU : SSE3 = 1 | AVX2 = 1 | ...` -> {"SSE3": "1", "AVX2": "1", ...}."""
    features: dict[str, str] = {}
    for part in text.replace("\n", "|").split("|"):
        if "=" not in part:
            continue
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name:
            features[name] = value.strip()
    return features


def built_features(info: dict[str, str]) -> list[str]:
    """The instruction-set features the build enabled (value 1)."""
    return [name for name, value in info.items() if value == "1" and name in BUILT_TO_CPUINFO]


def mismatches(info: dict[str, str], flags: set[str]) -> list[str]:
    """Build features whose instructions this CPU does not even claim to have."""
    return [name for name in built_features(info) if BUILT_TO_CPUINFO[name] not in flags]
