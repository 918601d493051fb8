"""Which command a message names: a checkout's script, or the extra for a wheel user."""

from __future__ import annotations

from pathlib import Path

from reflexguard.ops import install


def _checkout(root: Path) -> Path:
    """A source tree's shape: pyproject.toml and scripts/setup.sh beside the package."""
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "setup.sh").write_text("#!/usr/bin/env bash\n")
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "reflexguard").mkdir()
    return root / "reflexguard"


def _site_packages(root: Path) -> Path:
    package = root / "lib" / "python3.11" / "site-packages" / "reflexguard"
    package.mkdir(parents=True)
    return package


def test_a_checkout_is_told_the_setup_script(tmp_path: Path) -> None:
    package = _checkout(tmp_path / "repo")
    assert install.checkout_root(package) == tmp_path / "repo"
    assert install.SETUP_SCRIPT in install.install_runtime(package)
    assert install.SETUP_SCRIPT in install.rebuild_runtime(package)
    assert install.EMBEDDED_EXTRA not in install.install_runtime(package)


def test_a_wheel_in_site_packages_is_told_the_extra(tmp_path: Path) -> None:
    package = _site_packages(tmp_path / "venv")
    assert install.checkout_root(package) is None
    assert install.EMBEDDED_EXTRA in install.install_runtime(package)
    assert install.SETUP_SCRIPT not in install.install_runtime(package)
    assert install.SETUP_SCRIPT not in install.rebuild_runtime(package)


def test_a_setup_script_without_our_pyproject_is_no_checkout(tmp_path: Path) -> None:
    package = _checkout(tmp_path / "repo")
    (tmp_path / "repo" / "pyproject.toml").unlink()
    assert install.checkout_root(package) is None


def test_this_test_run_is_a_checkout() -> None:
    # The suite runs from the repository: the default looks where the package really lies.
    assert install.checkout_root() == Path(__file__).resolve().parents[2]
