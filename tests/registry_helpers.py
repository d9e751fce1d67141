"""Installs throw-away plugin distributions (real dist-info + entry points) on ``sys.path``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

CLEAN_ENV = {"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}


def install_distribution(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Write ``modules`` (name -> source) and a dist-info declaring ``entry_points`` under ``root``."""
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[shimkit]\n{lines}\n")
    for name in modules:
        sys.modules.pop(name, None)
