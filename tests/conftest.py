"""Every test audits with an empty audit cache of its own: `shimkit audit` caches results under
$XDG_CACHE_HOME by default, and a test must neither read a result another run left nor write to the
user's cache (subprocesses inherit the variable). Builds stay where they were before any test moved
$XDG_CACHE_HOME (pinned through $SHIMKIT_BUILD_DIR): the store verifies every entry before use, and
rebuilding the runtime and every kernel per test would multiply the suite's time. The environment's
prebuilt store is left out ($SHIMKIT_PREBUILT_DIR empty): tests assert what is built and where, and the
tests of that store give it one of their own."""

import os

import pytest

from shimkit.store import PREBUILT_ENV, ROOT_ENV, default_root

os.environ[ROOT_ENV] = str(default_root())
os.environ[PREBUILT_ENV] = ""


@pytest.fixture(autouse=True)
def _private_audit_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


# Test files whose tests share an expensive module-scoped fixture: each runs whole in one xdist worker,
# so the fixture is built once per run rather than once per worker. (xdist's own `--dist loadgroup` cannot
# do this here: with pytest 9 it silently ignores `xdist_group` marks.) Other tests are sent one by one.
ONE_WORKER_FILES = ("tests/test_audit_zoo.py",)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # what was asked for explicitly (--dist loadfile, worksteal, ...)
    from xdist.scheduler import LoadScopeScheduling

    class FilesInOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return path if path in ONE_WORKER_FILES else nodeid

    return FilesInOneWorker(config, log)
