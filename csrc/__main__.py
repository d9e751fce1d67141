"""``python -m shimkit.csrc sanitized-module``: the ASan+UBSan build of ``shimkit._C`` for ``csrc/sanitize.sh``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from shimkit.csrc.build import sanitized_module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shimkit.csrc",
                                     description="Build shimkit._C for the sanitizer run.")
    parser.add_argument("target", choices=["sanitized-module"],
                        help="sanitized-module: shimkit._C with AddressSanitizer and UndefinedBehaviorSanitizer")
    parser.parse_args(argv)
    print(sanitized_module())
    return 0


if __name__ == "__main__":
    sys.exit(main())
