"""The torch and executorch releases shimkit is tested against, checked once at import.

The audit and the passes touch private Inductor and ExecuTorch details that move between releases, so an
untested release is refused with a message naming what was found and what is supported, instead of
failing later inside Inductor. ``SHIMKIT_SKIP_VERSION_CHECK=1`` turns the refusal into a warning.
"""

from __future__ import annotations

import os
import warnings
from importlib import metadata

SUPPORTED = {
    # distribution: (tested releases as "major.minor" prefixes, what CI pins)
    "torch": (("2.13", "2.14"), "2.13.0"),
    "executorch": (("1.5",), "1.5.1"),
}


class UnsupportedVersionError(ImportError):
    """A dependency is installed at a release shimkit is not tested against."""


def _release(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def check_release(dist: str, version: str, *, what: str = "shimkit") -> str:
    """The ``major.minor`` release of ``version``, checked against ``dist``'s tested releases:
    refused with :class:`UnsupportedVersionError` naming ``what`` needs it, or only warned about under
    ``SHIMKIT_SKIP_VERSION_CHECK=1`` (the one policy every check follows)."""
    releases, pinned = SUPPORTED[dist]
    release = _release(version)
    if release not in releases:
        _refuse(f"{what}: {dist} {version} is not supported; shimkit is tested with {dist} "
                f"{' or '.join(r + '.x' for r in releases)} (CI pins {dist}=={pinned})")
    return release


def _refuse(message: str) -> None:
    if os.environ.get("SHIMKIT_SKIP_VERSION_CHECK") == "1":
        warnings.warn(message + " (continuing: SHIMKIT_SKIP_VERSION_CHECK=1)", stacklevel=3)
    else:
        raise UnsupportedVersionError(message + ". Set SHIMKIT_SKIP_VERSION_CHECK=1 to try anyway.")


def check_versions() -> dict[str, str]:
    """Return the installed versions, raising :class:`UnsupportedVersionError` for untested ones."""
    found: dict[str, str] = {}
    problems = []
    for dist, (releases, pinned) in SUPPORTED.items():
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            problems.append(f"{dist} is not installed (install {dist}=={pinned})")
            continue
        found[dist] = version
        if _release(version) not in releases:
            problems.append(
                f"{dist} {version} is not supported; shimkit is tested with {dist} "
                f"{' or '.join(r + '.x' for r in releases)} (CI pins {dist}=={pinned})"
            )
    if problems:
        _refuse("shimkit: " + "; ".join(problems))
    return found
