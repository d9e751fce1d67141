"""Which build of the compiled module the kernel tests use.

Normally ``shimkit._C``. ``SHIMKIT_NATIVE_MODULE=/path/_C....so`` loads another build of the same
sources instead -- the sanitizer build that ``csrc/sanitize.sh`` makes -- without touching the installed
one that other processes share.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
from types import ModuleType


@functools.lru_cache(maxsize=None)
def native() -> ModuleType:
    override = os.environ.get("SHIMKIT_NATIVE_MODULE")
    if not override:
        return importlib.import_module("shimkit._C")
    # The init function is found by the last name component, so it must stay "_C".
    loader = importlib.machinery.ExtensionFileLoader("shimkit_native_override._C", override)
    spec = importlib.util.spec_from_file_location("shimkit_native_override._C", override, loader=loader)
    if spec is None:
        raise ImportError(f"SHIMKIT_NATIVE_MODULE={override!r} is not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
