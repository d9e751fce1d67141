"""The ``shimkit`` console script, as a user runs it."""

import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))  # the console script pip installed


def run(*args, env=None):
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=300)


def test_plugins_json_lists_builtins_and_the_example_package():
    result = run(SHIMKIT, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1
    by_name = {p["name"]: p for p in report["plugins"]}
    assert by_name["mm"]["source"]["kind"] == "builtin"
    assert by_name["mm"]["shims"][0]["symbol"] == "aoti_torch_mps_mm_out"
    assert by_name["example-logaddexp"]["source"]["distribution"] == "shimkit-example-plugin"
    assert report["problems"] == []


def test_plugins_table_via_python_dash_m_shows_blocked_plugins():
    result = run(sys.executable, "-m", "shimkit", "plugins", env={"SHIMKIT_BLOCK_PLUGINS": "topk"})
    assert result.returncode == 0, result.stderr
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("topk ")]
    assert "blocked" in line



def test_the_plugins_table_wraps_wide_cells_and_the_store_says_sizes_in_the_right_unit():
    result = run(SHIMKIT, "plugins")
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) < 200  # linalg's row was 2,500 characters wide
    from shimkit.cli import _size

    assert [_size(n) for n in (512, 1536, 5 * 1024 ** 2, 8 * 1024 ** 3)] == ["512 B", "1.5 KiB", "5.0 MiB", "8.0 GiB"]

def test_config_cmake_prints_a_cmake_list():
    result = run(SHIMKIT, "config", "mps", "--cmake")
    assert result.returncode == 0, result.stderr
    assert "set(SHIMKIT_MPS_KERNEL_SOURCES" in result.stdout


@pytest.mark.parametrize("argv", [[SHIMKIT], [SHIMKIT, "config", "tpu"]])
def test_bad_usage_exits_2_with_a_message(argv):
    result = run(*argv)
    assert result.returncode == 2 and "usage: shimkit" in result.stderr


def _imported_modules(*argv: str) -> set[str]:
    """The modules ``python -m shimkit ARGV`` imports (from ``-X importtime``)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "shimkit", *argv], capture_output=True,
                          text=True, timeout=300)
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_help_imports_neither_torch_nor_executorch():
    modules = _imported_modules("--help")
    assert "shimkit.audit.cli" in modules  # the audit's options are in the help
    assert "torch" not in modules and "executorch" not in modules


def test_listing_plugins_does_not_import_executorchs_compiler():
    modules = _imported_modules("plugins")
    assert "shimkit.backend" in modules and "executorch.exir" not in modules  # exir alone takes seconds


def test_merge_is_listed_and_an_unwritable_audit_report_is_refused_before_torch_is_imported(tmp_path):
    assert "merge" in run(SHIMKIT, "--help").stdout.split("positional arguments:")[1]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "shimkit", "audit", "--report",
                           str(tmp_path / "no" / "such" / "report.md"), "seed_split_linear"],
                          capture_output=True, text=True, timeout=300)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert done.returncode == 2 and "usage: shimkit audit" in done.stderr and "cannot be written" in done.stderr
    assert "torch" not in modules  # refused in a moment, not after an audit of minutes lost its table
