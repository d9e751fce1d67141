"""shimkit's pytest plugin gives property tests that call into shimkit a deadline that fits them, under plain
``pytest`` in a user's own project (no profile, no ``CI``): the README's and the plugin guide's examples
failed there with hypothesis' ``DeadlineExceeded`` (their first example compiles). Tests with their own
``@settings``, and tests that do not use shimkit, keep hypothesis' rules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SLOW_PROPERTIES = textwrap.dedent("""
    import time

    from hypothesis import given, settings, strategies as st

    from shimkit.testing import tensors

    calls = {}


    def first_example_slow(test):  # as a property's first example is: it compiles
        calls[test] = calls.get(test, 0) + 1
        time.sleep(0.3 if calls[test] == 1 else 0)


    @given(st.integers())
    def test_calls_shimkit(x):
        tensors  # a name of shimkit's
        first_example_slow("calls_shimkit")


    @given(st.integers())
    @settings(deadline=100)
    def test_calls_shimkit_with_its_own_deadline(x):
        tensors
        first_example_slow("own_deadline")


    @given(st.integers())
    def test_does_not_call_shimkit(x):
        first_example_slow("no_shimkit")
""")


def _pytest(folder, *options: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "SHIMKIT_HYPOTHESIS_PROFILE")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                           "-o", "addopts=", *options, "test_slow.py"], cwd=folder, capture_output=True,
                          text=True, timeout=600, env=environment)
    outcomes = {}
    for line in done.stdout.splitlines():
        for outcome in ("PASSED", "FAILED"):
            if line.startswith(outcome + " "):
                outcomes[line.split("::", 1)[1].split(" ", 1)[0]] = outcome
    return outcomes


def test_plain_pytest_lifts_the_deadline_of_properties_that_use_shimkit_and_only_those(tmp_path):
    (tmp_path / "test_slow.py").write_text(SLOW_PROPERTIES)
    assert _pytest(tmp_path) == {"test_calls_shimkit": "PASSED", "test_calls_shimkit_with_its_own_deadline": "FAILED",
                                 "test_does_not_call_shimkit": "FAILED"}


def test_the_project_sets_another_deadline_in_its_ini(tmp_path):
    (tmp_path / "test_slow.py").write_text(SLOW_PROPERTIES)
    assert _pytest(tmp_path, "-o", "shimkit_deadline=100", "-k", "test_calls_shimkit")["test_calls_shimkit"] == "FAILED"
    assert _pytest(tmp_path, "-o", "shimkit_deadline=1000", "-k", "test_calls_shimkit")["test_calls_shimkit"] == "PASSED"
