"""``python -m shimkit.csrc TARGET``: builds for the sanitizer run (``csrc/sanitize.sh``)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from shimkit.csrc.build import sanitized_module
from shimkit.csrc.reference_shim import build_reference_shim


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shimkit.csrc",
                                     description="Build shimkit's kernels for the sanitizer run.")
    parser.add_argument("target", choices=["sanitized-module", "reference-shim"],
                        help="sanitized-module: ASan+UBSan shimkit._C; reference-shim: the libtorch-linked "
                             "reference c-shim library (sanitized when SHIMKIT_SANITIZE=1)")
    args = parser.parse_args(argv)
    print(sanitized_module() if args.target == "sanitized-module" else build_reference_shim())
    return 0


if __name__ == "__main__":
    sys.exit(main())
