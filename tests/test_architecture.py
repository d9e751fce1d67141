"""The import graph of the installed package: layered, with no cycles.

Every ``import`` in every module of ``shimkit.*`` (at module level or inside a function) is read with
``ast`` from the installed package's folders, so the check follows the ``shimkit.*`` mapping of the
top-level folders exactly as users import them.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import shimkit
from shimkit._rooms import ROOMS

# Lowest first: a module may import its own package and packages of the same or a lower layer.
LAYERS = (
    ("shimkit._rooms", "shimkit._versions", "shimkit._ordering", "shimkit._patching", "shimkit._interrupts",
     "shimkit._progress", "shimkit._C",
     "shimkit.store", "shimkit.csrc"),
    ("shimkit.metal",),
    ("shimkit.objc",),
    ("shimkit.registry",),
    ("shimkit.runtime",),
    ("shimkit.passes",),
    ("shimkit.plugins",),
    ("shimkit.backend",),
    ("shimkit.integration",),
    ("shimkit.audit",),
    ("shimkit.testing",),
    ("shimkit.cli", "shimkit.__main__"),
)


def layer_of(module: str) -> tuple[int, str]:
    if module == "shimkit":
        return 0, module  # the facade's __init__: a docstring and __version__
    for index, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return index, package
    raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS")


def installed_modules() -> dict[str, Path]:
    modules = {}
    roots = {"shimkit": Path(shimkit.__file__).parent}
    for name in ROOMS:
        spec = importlib.util.find_spec(f"shimkit.{name}")
        roots[f"shimkit.{name}"] = Path(next(iter(spec.submodule_search_locations)))
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            relative = path.relative_to(root).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            if package == "shimkit" and parts and parts[0] in ROOMS:
                continue  # a mapped folder seen through the facade's path: counted under its own root
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(module: str, path: Path, annotations: bool = False) -> set[str]:
    """The ``shimkit.*`` names ``module`` imports; with ``annotations``, those under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in (ast.walk(tree) if annotations else _runtime_nodes(tree)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "shimkit" or name.startswith("shimkit.")}


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in ast.walk(child))
            continue
        yield node
        yield from _runtime_nodes(node)


def _graph(annotations: bool = False) -> dict[str, set[str]]:
    modules = installed_modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imports_of(module, path, annotations):
            while name not in modules and "." in name:  # `from pkg import function` names no module
                name = name.rsplit(".", 1)[0]
            if name in modules and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def test_no_module_imports_a_higher_layer():
    upward = []
    for module, targets in _graph().items():
        own, _ = layer_of(module)
        for target in targets:
            theirs, package = layer_of(target)
            if theirs > own:
                upward.append(f"{module} imports {target} ({package} is above it)")
    assert not upward, "\n".join(sorted(upward))


def test_the_import_graph_has_no_cycles():
    # Imports for annotations count: two modules that name each other's types are one idea in two files.
    graph = _graph(annotations=True)
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "\n".join(cycles)


def test_every_top_level_package_folder_is_a_room_with_a_layer():
    root = Path(__file__).resolve().parents[1]
    folders = {path.parent.name for path in root.glob("*/__init__.py")} - {"shimkit"}
    assert folders == set(ROOMS), "a top-level package folder must be listed in shimkit/_rooms.py (and LAYERS)"
    for room in ROOMS:
        layer_of(f"shimkit.{room}")


def test_every_module_compiles_without_a_warning():
    # An invalid escape in a docstring is a SyntaxWarning (a DeprecationWarning before 3.12) in every user's
    # test run that turns warnings into errors.
    import warnings

    noisy = []
    for module, path in installed_modules().items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(path.read_text(), str(path), "exec")
        noisy += [f"{module}: {warning.message}" for warning in caught]
    assert not noisy, "\n".join(noisy)
