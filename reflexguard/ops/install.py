"""How this reflexguard was installed, so that a message names the command that fits.

A checkout (scripts/setup.sh, an editable install, PYTHONPATH) has the repository's
scripts beside the package; an installed wheel (pip, uv, pipx) sits in site-packages with
no scripts/ anywhere near it. A wheel user told to "run scripts/setup.sh" has nothing to
run, and a checkout user told to pip install would bypass the portable, cached build that
setup makes (docs/embedded.md). Every user-facing "how to install or rebuild the runtime"
sentence comes from here.
"""

from __future__ import annotations

from pathlib import Path

# Not `import reflexguard`: the package's __init__ imports the API lazily, and a chain
# from ops up to the API is what the layers contract refuses.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# What the pip (or uv) user runs: the extra that pulls llama-cpp-python (README, "Install").
EMBEDDED_EXTRA = "pip install 'reflexguard[embedded]'"
SETUP_SCRIPT = "scripts/setup.sh"


def checkout_root(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The source tree this package runs from, or None for an installed wheel.

    Both files are asked for: a project of the user's own could hold a scripts/setup.sh
    above site-packages only by accident, and never beside our pyproject.toml.
    """
    root = package_dir.parent
    if (root / SETUP_SCRIPT).is_file() and (root / "pyproject.toml").is_file():
        return root
    return None


def install_runtime(package_dir: Path = PACKAGE_DIR) -> str:
    """The command that installs the embedded runtime (llama-cpp-python), as an imperative."""
    if checkout_root(package_dir) is not None:
        return f"run {SETUP_SCRIPT}"
    return f"install it with `{EMBEDDED_EXTRA}`"


def rebuild_runtime(package_dir: Path = PACKAGE_DIR) -> str:
    """How to rebuild llama-cpp-python with flags this CPU runs, as an imperative."""
    if checkout_root(package_dir) is not None:
        return (f"rebuild with {SETUP_SCRIPT} (GGML_NATIVE=OFF; it probes AVX-512 before "
                "using it and never enables AMX)")
    # A wheel user has no probe script: the README's "Install" section has the portable
    # flags (x86-64-v3, no AVX-512, no AMX) as one pip command.
    return ("rebuild llama-cpp-python with the portable flags (GGML_NATIVE=OFF, no AMX): "
            "the pip command is in reflexguard's README, \"Install\"")

