"""mypy on the package as users import it: ``shimkit.*``, assembled from the top-level folders the way
setup.py maps them (the rooms of shimkit/_rooms.py, a tree of links in a temporary folder), with the settings in
pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shimkit._rooms import ROOMS

ROOT = Path(__file__).resolve().parent.parent


def namespace_map() -> dict[str, str]:
    return {"shimkit": "shimkit", **{room: f"shimkit.{room}" for room in ROOMS}}


def test_the_package_type_checks(tmp_path):
    package = tmp_path / "shimkit"
    package.mkdir()
    for folder, name in namespace_map().items():
        if name == "shimkit":
            for module in (ROOT / folder).glob("*.py"):
                (package / module.name).symlink_to(module)
        else:
            (package / name.split(".", 1)[1]).symlink_to(ROOT / folder, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / ".mypy_cache"), "-p", "shimkit"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
