"""The README's pip commands for the embedded runtime say what the code does."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

from reflexguard.ops.install import EMBEDDED_EXTRA

ROOT = Path(__file__).resolve().parents[2]


def _llama_build() -> ModuleType:
    # scripts/ is no package: loaded from its file, as setup.sh runs it.
    spec = importlib.util.spec_from_file_location("llama_build", ROOT / "scripts" /
                                                  "llama_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Install", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_portable_flags_are_setups_avx2_build() -> None:
    build = _llama_build()
    (flags,) = re.findall(r'CMAKE_ARGS="([^"]*)"', _install_section())
    assert flags.split() == build._TRIM + build._BASELINE + build._AVX512_OFF


def test_the_extra_the_messages_name_exists_and_pulls_llama_cpp_python() -> None:
    assert EMBEDDED_EXTRA in _install_section()
    extra = re.fullmatch(r"pip install 'reflexguard\[(\w+)\]'", EMBEDDED_EXTRA)
    assert extra is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["optional-dependencies"][extra.group(1)]
    assert any(line.startswith("llama-cpp-python") for line in wanted)
