"""Untested torch/executorch releases are refused at import with a message naming them."""

import pytest

from shimkit import _versions


def fake_versions(monkeypatch, **versions):
    def version(dist):
        if versions.get(dist) is None:
            raise _versions.metadata.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr(_versions.metadata, "version", version)


def test_supported_versions_pass(monkeypatch):
    fake_versions(monkeypatch, torch="2.14.1+cpu", executorch="1.5.1")
    assert _versions.check_versions() == {"torch": "2.14.1+cpu", "executorch": "1.5.1"}


def test_unsupported_torch_is_refused_with_a_clear_message(monkeypatch):
    fake_versions(monkeypatch, torch="2.15.0", executorch="1.5.1")
    monkeypatch.delenv("SHIMKIT_SKIP_VERSION_CHECK", raising=False)
    with pytest.raises(_versions.UnsupportedVersionError,
                       match=r"torch 2\.15\.0 is not supported; .*2\.13\.x or 2\.14\.x .*torch==2\.13\.0"):
        _versions.check_versions()


def test_missing_executorch_is_named(monkeypatch):
    fake_versions(monkeypatch, torch="2.13.0", executorch=None)
    monkeypatch.delenv("SHIMKIT_SKIP_VERSION_CHECK", raising=False)
    with pytest.raises(ImportError, match=r"executorch is not installed \(install executorch==1\.5\.1\)"):
        _versions.check_versions()


def test_skip_variable_downgrades_to_a_warning(monkeypatch):
    fake_versions(monkeypatch, torch="2.12.0", executorch="1.5.1")
    monkeypatch.setenv("SHIMKIT_SKIP_VERSION_CHECK", "1")
    with pytest.warns(UserWarning, match="torch 2.12.0 is not supported"):
        _versions.check_versions()


def test_the_pytest_plugin_neither_imports_torch_nor_checks_versions():
    # pytest imports the plugin in every project of an environment with shimkit installed: an untested
    # torch there must not break their test runs.
    import subprocess
    import sys

    probe = ("import sys, shimkit.testing.pytest_plugin; "
             "print(sorted(m for m in ('torch', 'shimkit.registry', 'shimkit.passes') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
