"""The artifact store: everything shimkit builds or caches, in one private folder, each entry verified before use.

Compiled kernels, shared libraries, objects, precompiled headers, split-kernel texts and audit results are
entries of one store. An entry is a folder ``<root>/<kind>/<key>/`` named by the digest of everything that
went into it (its *key*), holding its files and a ``manifest.json`` that records each file's size and
SHA-256, the kind, the full key and a few words on what the key was made of. The rules, each against a
threat found in shimkit's earlier caches (docs/reliability.md):

* **The root is private.** ``$SHIMKIT_BUILD_DIR`` or ``$XDG_CACHE_HOME/shimkit`` (``~/.cache/shimkit``),
  created ``0700``. A root that is a symlink, belongs to another user or is writable by group or others is
  refused with :class:`EnvironmentFailure` naming it: anyone who can write there could plant a library
  this process would load.
* **Nothing unverified is used.** :meth:`Store.lookup` returns an entry only when its manifest parses,
  names this kind and key, and every file it lists is a regular file of the recorded size and digest. A
  missing, truncated, garbled or foreign entry is rebuilt (and said so once on stderr), never loaded.
* **Built once, whole or not at all.** :meth:`Store.build` builds under a per-entry lock (opened without
  following symlinks) into a private staging folder, ``fsync``\\ s every file and the manifest, then renames
  the folder into place: readers see a whole entry or none, and processes that need the same entry at once
  build it once. A failed build leaves nothing behind.
* **Prebuilt entries are read, never written.** ``shimkit cache prebuild`` (which ``./dev setup`` runs)
  builds what every program needs into the Python environment's own store,
  ``$SHIMKIT_PREBUILT_DIR`` (default ``<sys.prefix>/share/shimkit/prebuilt``; empty: none), as POCL
  installs its kernel library. A lookup the root misses is answered from there, under the same rules: the
  folder refused unless it is the user's or root's and writable by no one else, every entry verified.
  Nothing is built, pruned or cleaned there.
* **Bounded.** Every use marks an entry used (its folder's mtime); once a process has written more than a
  share of the cap, the least recently used entries are evicted until the store fits
  (``$SHIMKIT_STORE_MAX_SIZE``, default 8 GiB). :func:`prune` and :func:`clean` remove entries safely while
  other processes use the store: an entry whose lock is held is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

FORMAT = 1
MANIFEST = "manifest.json"
ROOT_ENV = "SHIMKIT_BUILD_DIR"
PREBUILT_ENV = "SHIMKIT_PREBUILT_DIR"
MAX_SIZE_ENV = "SHIMKIT_STORE_MAX_SIZE"
DEFAULT_MAX_BYTES = 8 << 30
KEY_CHARS = 32  # 128 bits of SHA-256: the one length every entry name has
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class EnvironmentFailure(RuntimeError):
    """shimkit could not do its work on this machine, for a reason outside the model: the store's folder is
    unusable (a file, read-only, another user's, a symlink), the disk is full, the compiler is missing or
    fails for a reason outside the program, or an artifact is corrupt and cannot be rebuilt. An audit that
    meets one "could not run" (exit 2); it is never a verdict on the model."""


def digest_of(parts: Sequence[str | bytes]) -> str:
    """The SHA-256 of ``parts``, each length-prefixed so that no two different lists of parts collide."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_digest(folder: str | os.PathLike, patterns: Sequence[str] = ("*",)) -> str:
    """The digest of the files under ``folder`` matching ``patterns`` (recursively), by relative name and
    contents: the one digest of a set of headers or sources that a key holds. Each file is read once per
    version of it (its size and mtime are the memo's key)."""
    root = Path(folder)
    paths = sorted({p for pattern in patterns for p in root.rglob(pattern)
                    if p.is_file() and "__pycache__" not in p.parts})
    return digest_of([part for path in paths for part in (str(path.relative_to(root)), current_file_digest(path))])


def current_file_digest(path: str | os.PathLike) -> str:
    """:func:`file_digest`, read once per version of the file (its size and mtime)."""
    status = os.stat(path)
    return _memo_file_digest(str(path), status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=8192)
def _memo_file_digest(path: str, mtime_ns: int, size: int) -> str:
    return file_digest(path)


def parse_size(text: str) -> int:
    """``"512M"``, ``"8G"``, ``"1.5GiB"``, ``"4096"`` as bytes; a ``ValueError`` naming the text otherwise."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = cleaned[-1:] if cleaned[-1:] in _UNITS and cleaned[-1:] else ""
    try:
        value = float(cleaned[: len(cleaned) - len(unit)])
    except ValueError:
        raise ValueError(f"{text!r} is not a size (a number of bytes, or with K, M, G or T)") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a size: it must be a finite number >= 0")
    return int(value * _UNITS[unit])


def default_root() -> Path:
    """Where builds go: ``$SHIMKIT_BUILD_DIR``, else :func:`user_cache_root`."""
    configured = os.environ.get(ROOT_ENV)
    return Path(configured) if configured else user_cache_root()


def user_cache_root() -> Path:
    """``$XDG_CACHE_HOME/shimkit`` (``~/.cache/shimkit`` when unset), where the XDG base directory
    specification puts a user's caches: the audit's results always, builds unless ``$SHIMKIT_BUILD_DIR``
    says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shimkit"


def prebuilt_root() -> Path | None:
    """The environment's read-only store: ``$SHIMKIT_PREBUILT_DIR`` (empty: none), else
    ``<sys.prefix>/share/shimkit/prebuilt``, beside the environment's packages."""
    configured = os.environ.get(PREBUILT_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    return Path(sys.prefix) / "share" / "shimkit" / "prebuilt"


@dataclass(frozen=True)
class Usage:
    """What one kind of entry takes in a store: :func:`usage`'s rows."""

    kind: str
    entries: int
    bytes: int


class Store:
    """The entries under ``root`` (checked and created on first use; see the module docstring), and those of
    the read-only store ``prebuilt`` where ``root`` has none."""

    def __init__(self, root: str | os.PathLike[str], prebuilt: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root)
        self.prebuilt = Path(prebuilt) if prebuilt else None
        self._prebuilt_refusal: str | None = None
        self._checked = False
        self._written = 0
        self._reported: set[Path] = set()
        self._verified: dict[Path, tuple] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:
        # A spawned worker (CUDA audits) gets the store by its root: its lock and memos are this process's.
        return (type(self), (self.root, self.prebuilt))

    # -- the root ------------------------------------------------------------------------------------------

    def checked_root(self) -> Path:
        """The root, created ``0700`` if absent; :class:`EnvironmentFailure` if it cannot be trusted or used."""
        if self._checked:
            return self.root
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                os.mkdir(self.root, 0o700)
            except FileExistsError:
                pass
            status = os.lstat(self.root)
        except OSError as error:
            raise EnvironmentFailure(f"the build folder {str(self.root)!r} cannot be used: "
                                     f"{error.strerror or error} (set {ROOT_ENV} to a folder of your own)") from error
        problem = _untrusted(status)
        if problem:
            raise EnvironmentFailure(f"the build folder {str(self.root)!r} is refused: {problem}; anything planted "
                                     f"there would be loaded and run (set {ROOT_ENV} to a folder of your own)")
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise EnvironmentFailure(f"the build folder {str(self.root)!r} cannot be used: it is not writable "
                                     f"(set {ROOT_ENV} to a folder of your own)")
        self._checked = True
        return self.root

    # -- entries -------------------------------------------------------------------------------------------

    def key(self, kind: str, parts: Sequence[str | bytes]) -> str:
        """The full key of an entry of ``kind`` made of ``parts``."""
        if not kind.replace("-", "").isalnum():
            raise ValueError(f"artifact kind {kind!r} must be letters, digits and '-'")
        return digest_of([f"shimkit-store-{FORMAT}", kind, *parts])

    def folder(self, kind: str, key: str) -> Path:
        return self.checked_root() / kind / key[:KEY_CHARS]

    def lookup(self, kind: str, key: str) -> Path | None:
        """The folder of the verified entry ``key`` of ``kind``, marked used; ``None`` where there is none or it
        fails verification."""
        folder = self.folder(kind, key)
        if self._verify(folder, kind, key) is None:
            _touch(folder)
            return folder
        return self._prebuilt_entry(kind, key)

    def _prebuilt_entry(self, kind: str, key: str) -> Path | None:
        if self.prebuilt is None or not self._prebuilt_trusted():
            return None
        folder = self.prebuilt / kind / key[:KEY_CHARS]
        problem = self._verify(folder, kind, key)
        if problem is None:
            return folder
        if problem != "absent":
            self._report_once(folder, f"shimkit: not using the prebuilt artifact {folder}: it was {problem}")
        return None

    def _prebuilt_trusted(self) -> bool:
        assert self.prebuilt is not None
        if self._prebuilt_refusal is None:
            try:
                problem = _untrusted(os.lstat(self.prebuilt), owners=(os.geteuid(), 0))
            except OSError:
                problem = "absent"
            self._prebuilt_refusal = problem or ""
            if problem and problem != "absent":
                self._report_once(self.prebuilt, f"shimkit: not using the prebuilt store {str(self.prebuilt)!r}: "
                                                 f"{problem}; anything planted there would be loaded and run")
        return not self._prebuilt_refusal

    def build(self, kind: str, key: str, produce: Callable[[Path], None], *,
              inputs: Mapping[str, str] | None = None) -> Path:
        """The folder of entry ``key`` of ``kind``: looked up, or built by ``produce(staging)``, which writes the
        entry's files into the empty folder ``staging``. One process builds, the others wait and take its
        entry. An ``OSError`` while storing (disk full, read-only folder) is :class:`EnvironmentFailure`;
        what ``produce`` raises is passed on, and nothing is stored."""
        found = self.lookup(kind, key)
        if found is not None:
            return found
        with self.locked(kind, key):
            folder = self.folder(kind, key)
            problem = self._verify(folder, kind, key)
            if problem is None:
                _touch(folder)
                return folder
            if problem != "absent":
                self._report_rebuild(folder, problem)
            with self.staging(kind) as staging:
                produce(staging)
                return self.commit(kind, key, staging, inputs=inputs)

    @contextlib.contextmanager
    def locked(self, kind: str, key: str) -> Iterator[None]:
        """Holds entry ``key``'s lock: one builder at a time, and :func:`prune` leaves the entry alone."""
        path = self.checked_root() / kind / f"{key[:KEY_CHARS]}.lock"
        descriptor = self._open_lock(path)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    @contextlib.contextmanager
    def staging(self, kind: str) -> Iterator[Path]:
        """An empty private folder beside ``kind``'s entries, removed on the way out unless committed."""
        parent = self.checked_root() / kind
        try:
            parent.mkdir(exist_ok=True, mode=0o700)
            staging = Path(tempfile.mkdtemp(dir=parent, prefix=".staging-"))
        except OSError as error:
            raise self._failure(f"cannot create a folder in {parent}", error) from error
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def commit(self, kind: str, key: str, staging: Path, *, inputs: Mapping[str, str] | None = None,
               replace: bool = False) -> Path:
        """``staging``'s files made entry ``key`` of ``kind`` (each synced, then the manifest, then one rename).
        An entry already there that verifies is kept and ``staging`` discarded, unless ``replace`` (an entry
        whose key does not decide all of its content, such as a list of the headers a source read)."""
        folder = self.folder(kind, key)
        try:
            files: dict[str, dict[str, int | str]] = {}
            sizes = 0
            for path in sorted(staging.iterdir()):
                if path.is_symlink() or not path.is_file():
                    raise ValueError(f"a {kind} artifact may hold only regular files, not {path.name!r}")
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
                files[path.name] = {"size": path.stat().st_size, "sha256": file_digest(path)}
                sizes += path.stat().st_size
            manifest = {"format": FORMAT, "kind": kind, "key": key, "files": files, "inputs": dict(inputs or {}),
                        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            with open(staging / MANIFEST, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging, 0o700)
            if folder.exists() or folder.is_symlink():
                if not replace and self._verify(folder, kind, key) is None:
                    return folder
                _discard(folder)
            os.rename(staging, folder)
            _fsync_folder(folder.parent)
        except OSError as error:
            raise self._failure(f"cannot store a {kind} artifact in {folder.parent}", error) from error
        self._verified.pop(folder, None)
        self._after_write(sizes)
        return folder

    # -- verification ----------------------------------------------------------------------------------------

    def _verify(self, folder: Path, kind: str, key: str) -> str | None:
        """``None`` when ``folder`` is a whole entry ``key`` of ``kind``, else what is wrong with it."""
        try:
            status = os.lstat(folder)
        except FileNotFoundError:
            return "absent"
        except OSError as error:
            return f"unreadable ({error.strerror or error})"
        if not stat.S_ISDIR(status.st_mode):
            return "not a folder"
        try:
            manifest_path = folder / MANIFEST
            manifest_status = os.lstat(manifest_path)
            files = self._file_states(folder)
            seen = (manifest_status.st_ino, manifest_status.st_mtime_ns, manifest_status.st_size, files)
            if self._verified.get(folder) == seen:
                return None
            with open(manifest_path, encoding="utf-8") as handle:
                manifest = json.load(handle)
        except FileNotFoundError:
            return "without a manifest"
        except (OSError, ValueError) as error:
            return f"with an unreadable manifest ({error})"
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            return "of another format"
        if manifest.get("kind") != kind or manifest.get("key") != key:
            return "a different entry's (foreign)"
        listed = manifest.get("files")
        if not isinstance(listed, dict) or set(listed) != {name for name, *_ in files}:
            return "with files its manifest does not list"
        for name, mode, size, _, _ in files:
            expected = listed[name]
            if not stat.S_ISREG(mode):
                return f"with {name} not a regular file"
            if not isinstance(expected, dict) or expected.get("size") != size:
                return f"with {name} truncated or grown"
            try:
                if file_digest(folder / name) != expected.get("sha256"):
                    return f"with {name} corrupt (its digest differs)"
            except OSError as error:
                return f"with {name} unreadable ({error.strerror or error})"
        self._verified[folder] = seen
        return None

    @staticmethod
    def _file_states(folder: Path) -> tuple:
        states = []
        for name in sorted(os.listdir(folder)):
            if name == MANIFEST:
                continue
            status = os.lstat(folder / name)
            states.append((name, status.st_mode, status.st_size, status.st_ino, status.st_mtime_ns))
        return tuple(states)

    def _report_rebuild(self, folder: Path, problem: str) -> None:
        self._report_once(folder, f"shimkit: rebuilding the cached artifact {folder}: it was {problem}")

    def _report_once(self, folder: Path, message: str) -> None:
        with self._lock:
            if folder in self._reported:
                return
            self._reported.add(folder)
        print(message, file=sys.stderr)

    # -- size --------------------------------------------------------------------------------------------------

    def _after_write(self, size: int) -> None:
        limit = max_bytes()
        with self._lock:
            self._written += size
            due = self._written >= limit // 16
            if due:
                self._written = 0
        if due:
            prune(self, limit)

    # -- helpers -----------------------------------------------------------------------------------------------

    def _open_lock(self, path: Path) -> int:
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise EnvironmentFailure(f"the lock file {path} is a symlink: refused (someone planted it)") from error
            raise self._failure(f"cannot open the lock file {path}", error) from error

    def _failure(self, what: str, error: OSError) -> EnvironmentFailure:
        reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        return EnvironmentFailure(f"{what}: {reason}")


def _untrusted(status: os.stat_result, owners: Sequence[int] | None = None) -> str | None:
    if stat.S_ISLNK(status.st_mode):
        return "it is a symlink"
    if not stat.S_ISDIR(status.st_mode):
        return "it is not a folder"
    if status.st_uid not in (owners or (os.geteuid(),)):
        return f"it belongs to another user (uid {status.st_uid})"
    if status.st_mode & 0o022:
        return f"it is writable by {'group and others' if status.st_mode & 0o002 and status.st_mode & 0o020 else 'others' if status.st_mode & 0o002 else 'its group'} (mode {stat.S_IMODE(status.st_mode):o})"
    return None


def _touch(folder: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(folder)


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _discard(folder: Path) -> None:
    """Removes ``folder`` by renaming it aside first, so no reader ever sees it half removed."""
    if folder.is_symlink() or not folder.is_dir():
        folder.unlink()
        return
    aside = folder.with_name(f".discarded-{folder.name}-{os.getpid()}-{threading.get_ident()}")
    os.rename(folder, aside)
    shutil.rmtree(aside, ignore_errors=True)


def max_bytes() -> int:
    """The store's size cap: ``$SHIMKIT_STORE_MAX_SIZE`` (``8G``, ``500M``) or 8 GiB."""
    configured = os.environ.get(MAX_SIZE_ENV)
    if not configured:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(configured)
    except ValueError as error:
        raise EnvironmentFailure(f"{MAX_SIZE_ENV}: {error}") from None


@dataclass(frozen=True)
class _Entry:
    kind: str
    folder: Path
    size: int
    used: float


def _entries(store: Store, root: Path | None = None) -> list[_Entry]:
    root = root or store.checked_root()
    found = []
    for kind_folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for folder in kind_folder.iterdir():
            if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
                continue  # a lock file, or a build's staging folder
            try:
                size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
                found.append(_Entry(kind_folder.name, folder, size, folder.stat().st_mtime))
            except OSError:
                continue  # removed by another process meanwhile
    return found


def usage(store: Store, prebuilt: bool = False) -> list[Usage]:
    """Entries and bytes per kind, largest first: of the root, or with ``prebuilt`` of the prebuilt store
    (none where there is none, or it is not trusted)."""
    if prebuilt and (store.prebuilt is None or not store._prebuilt_trusted()):
        return []
    totals: dict[str, list[int]] = {}
    for entry in _entries(store, store.prebuilt if prebuilt else None):
        counts = totals.setdefault(entry.kind, [0, 0])
        counts[0] += 1
        counts[1] += entry.size
    return sorted((Usage(kind, n, size) for kind, (n, size) in totals.items()), key=lambda u: (-u.bytes, u.kind))


def prune(store: Store, max_size: int, kinds: Sequence[str] | None = None,
          spare_used_within_s: float = 600.0) -> tuple[int, int]:
    """Removes the least recently used entries (of ``kinds``, all for ``None``) until the store holds at most
    ``max_size`` bytes. Entries another process holds locked, or used in the last ``spare_used_within_s``
    seconds (another audit may be about to load one it has just verified), are left. Returns (entries, bytes)
    removed."""
    every = _entries(store)
    entries = [e for e in every if kinds is None or e.kind in kinds]
    total = sum(e.size for e in every)
    removed = freed = 0
    recent = time.time() - spare_used_within_s
    for entry in sorted(entries, key=lambda e: e.used):
        if total <= max_size:
            break
        if entry.used < recent and _remove_unless_locked(store, entry):
            removed, freed, total = removed + 1, freed + entry.size, total - entry.size
    return removed, freed


def clean(store: Store, kinds: Sequence[str] | None = None) -> tuple[int, int]:
    """Removes every entry (of ``kinds``) no process holds locked, and staging folders a killed build left
    over an hour ago. Returns (entries, bytes) removed."""
    removed = freed = 0
    for entry in _entries(store):
        if (kinds is None or entry.kind in kinds) and _remove_unless_locked(store, entry):
            removed, freed = removed + 1, freed + entry.size
    stale = time.time() - 3600
    for leftover in store.checked_root().glob("*/.staging-*"):
        with contextlib.suppress(OSError):
            if leftover.is_dir() and not leftover.is_symlink() and leftover.stat().st_mtime < stale:
                shutil.rmtree(leftover)
    return removed, freed


def _remove_unless_locked(store: Store, entry: _Entry) -> bool:
    try:
        descriptor = store._open_lock(entry.folder.with_name(f"{entry.folder.name}.lock"))
    except EnvironmentFailure:
        return False
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # being built right now
        try:
            _discard(entry.folder)
        except OSError:
            return False
        return True
    finally:
        os.close(descriptor)


_default: dict[tuple[Path, Path | None], Store] = {}
_default_lock = threading.Lock()


def default_store(root: Path | None = None) -> Store:
    """The process's store at ``root`` (default :func:`default_root`) over :func:`prebuilt_root`, one per
    pair, so that what was verified once is remembered."""
    root = root or default_root()
    prebuilt = prebuilt_root()
    with _default_lock:
        store = _default.get((root, prebuilt))
        if store is None:
            store = _default[root, prebuilt] = Store(root, prebuilt)
        return store
