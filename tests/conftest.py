"""Every test audits with an empty audit cache of its own: `shimkit audit` caches results under
$XDG_CACHE_HOME by default, and a test must neither read a result another run left nor write to the
user's cache (subprocesses inherit the variable)."""

import pytest


@pytest.fixture(autouse=True)
def _private_audit_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
