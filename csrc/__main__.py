"""``python -m shimkit.csrc sanitized-module``: the ASan+UBSan build of ``shimkit._C`` for ``csrc/sanitize.sh``;
``python -m shimkit.csrc compiler``: the host C++ compiler that builds it, as one shell-quoted command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Sequence

from shimkit.csrc.build import compiler_command, sanitized_module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shimkit.csrc",
                                     description="Build shimkit._C for the sanitizer run.")
    parser.add_argument("target", choices=["sanitized-module", "compiler"],
                        help="sanitized-module: shimkit._C with AddressSanitizer and UndefinedBehaviorSanitizer; "
                             "compiler: the host C++ compiler command shimkit builds with")
    target = parser.parse_args(argv).target
    print(sanitized_module() if target == "sanitized-module" else shlex.join(compiler_command()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
