"""Fingerprints of what the work-group splitter (shimkit.metal.loops) writes, to hold a refactor of it to
byte-identical output.

Two sources of kernels:

* the repository's MSL, read statically: every ``*.metal`` file, and every string literal of the Python
  files under metal/, plugins/, tests/ and benchmarks/ that declares a kernel. Each goes through
  ``library._translation`` (translation, then the split), so a source the front end rejects is recorded
  with its error message;
* a corpus captured from test runs (``--capture OUT.pickle -- PYTEST ARGS``): every ``split_kernels``
  call the tests make (hypothesis' generated kernels, Inductor's kernels, sources the tests build with
  f-strings), saved with its arguments and replayed by ``--corpus``.

Every split runs against a fresh artifact store (``$SHIMKIT_BUILD_DIR`` a new temporary folder), so
nothing is read from an earlier run's cache. The result is a JSON of {kernel id: sha256 of the split's
text, the kernels split and the reasons for the others, or of the error message}.

    python tools/split_identity.py --corpus /tmp/split_corpus.pickle --out /tmp/split_before.json
    python tools/split_identity.py --corpus /tmp/split_corpus.pickle --out /tmp/split_after.json \
        --compare /tmp/split_before.json
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC_FOLDERS = ("metal", "plugins", "tests", "benchmarks")
KERNEL_MARKERS = ("kernel void", "[[kernel]]", "[[ kernel ]]")


def static_sources() -> dict[str, str]:
    sources: dict[str, str] = {}
    for path in sorted(ROOT.rglob("*.metal")):
        if ".venv" not in path.parts:
            sources[str(path.relative_to(ROOT))] = path.read_text()
    for folder in STATIC_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "build" in path.parts or "__pycache__" in path.parts:
                continue
            try:
                tree = ast.parse(path.read_text())
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
                        marker in node.value for marker in KERNEL_MARKERS) and "{" in node.value:
                    sources[f"{path.relative_to(ROOT)}:{node.lineno}:{node.col_offset}"] = node.value
    return sources


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def split_static(sources: dict[str, str]) -> dict[str, str]:
    from shimkit.metal import library

    results = {}
    for name, source in sources.items():
        try:
            translation = library._translation(source)
            value: object = ["ok", translation.text,
                             sorted((k, v.split, v.fibers_because) for k, v in translation.kernels.items())]
        except Exception as error:  # the front end's verdict is part of the behaviour held
            value = ["error", type(error).__name__, str(error)]
        results[f"static:{name}"] = digest(value)
        if value[0] == "ok" and any(split for _, split, _ in value[2]):
            print("split:", name)
    return results


def split_corpus(path: Path) -> dict[str, str]:
    from shimkit.metal.library import INCLUDE_DIR
    from shimkit.metal.loops import split_kernels
    from shimkit.store import default_store

    results = {}
    for index, (label, text, kernels, compiler) in enumerate(pickle.loads(path.read_bytes())):
        try:
            split = split_kernels(text, kernels, INCLUDE_DIR, default_store(), compiler)
            value: object = ["ok", split.text, sorted(split.split), sorted(split.reasons.items())]
        except Exception as error:
            value = ["error", type(error).__name__, str(error)]
        results[f"captured:{path.stem}:{index}:{label}"] = digest(value)
    return results


class Capture:
    """A pytest plugin recording every split_kernels call of the tests it runs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict, tuple[str, ...]]] = []
        self.seen: set[str] = set()
        self.test = ""

    def pytest_configure(self, config) -> None:
        import shimkit.metal.library as library

        original = library.split_kernels

        def recording(text, kernels, include_dir, store, compiler=("c++",)):
            key = digest([text, repr(sorted((n, [(p.text, p.kind, p.binding) for p in ps])
                                             for n, ps in kernels.items())), list(compiler)])
            if kernels and key not in self.seen:
                self.seen.add(key)
                self.calls.append((self.test, text, kernels, tuple(compiler)))
            return original(text, kernels, include_dir, store, compiler)

        library.split_kernels = recording

    def pytest_runtest_setup(self, item) -> None:
        self.test = item.nodeid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="where the JSON of fingerprints goes")
    parser.add_argument("--corpus", type=Path, action="append", default=[], help="a captured corpus to replay")
    parser.add_argument("--no-static", action="store_true", help="leave the repository's own sources out")
    parser.add_argument("--compare", type=Path, help="an earlier JSON that every fingerprint must match")
    parser.add_argument("--capture", type=Path, help="run pytest with the arguments after -- and save its splits")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.capture:
        import pytest

        capture = Capture()
        code = pytest.main(["-p", "no:cacheprovider", *args.pytest_args], plugins=[capture])
        args.capture.write_bytes(pickle.dumps(capture.calls))
        print(f"captured {len(capture.calls)} distinct splits (pytest exit {code})")
        return 0
    os.environ["SHIMKIT_BUILD_DIR"] = tempfile.mkdtemp(prefix="split-identity-")  # nothing read from a cache
    results: dict[str, str] = {}
    if not args.no_static:
        results.update(split_static(static_sources()))
    for corpus in args.corpus:
        results.update(split_corpus(corpus))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"{len(results)} kernel sources fingerprinted")
    if args.compare:
        before = json.loads(args.compare.read_text())
        differ = sorted(k for k in before.keys() | results.keys() if before.get(k) != results.get(k))
        print(f"compared {len(before)} against {len(results)}: {len(before) - len(differ)} identical, "
              f"{len(differ)} differ or missing")
        for name in differ[:50]:
            print("  differs:", name)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
