"""Registries built for a test: plugin objects yielding given records, and throw-away plugin distributions
(real dist-info + entry points) installed on ``sys.path``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import shimkit.plugins.addmm as addmm_plugin
from shimkit.backend import new_registry
from shimkit.registry import Kernel, OpPlugin, PassSpec, Shim, hookimpl

CLEAN_ENV = {"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}


class Records:
    """A plugin object yielding the given op plugins and passes."""

    def __init__(self, *records):
        self.records = records

    @hookimpl
    def shimkit_op_plugins(self):
        return [r for r in self.records if isinstance(r, OpPlugin)]

    @hookimpl
    def shimkit_passes(self):
        return [r for r in self.records if isinstance(r, PassSpec)]


def registry_with(*plugins):
    registry = new_registry(env=CLEAN_ENV)
    for index, plugin in enumerate(plugins):
        registry.register(plugin, name=f"test-plugin-{index}")
    return registry


# Kernel sources must exist and be kernel sources; shimkit's own addmm Metal kernel is one.
KERNEL_SOURCE = addmm_plugin.KERNEL.runtime_paths[1]


def kernel_plugin(name, symbol="aoti_torch_mps_erfinv", op="aten::erfinv", priority=0, tmp=KERNEL_SOURCE):
    kernel = Kernel(name="test_kernel", directory=str(Path(tmp).parent),
                    runtime_sources=(Path(tmp).name,))
    return OpPlugin(name=name, ops=(op,), priority=priority,
                    shims=(Shim(op=op, device="mps", symbol=symbol, kernel=kernel),))


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
