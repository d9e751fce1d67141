"""Kernel sources shipped with shimkit, and where to find them."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent


def get_include() -> str:
    """The include directory holding shimkit's portable kernel SDK headers."""
    return str(SOURCE_DIR / "include")
