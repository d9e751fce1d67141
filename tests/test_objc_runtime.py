"""shimkit's Objective-C runtime and Foundation (objc/, issue 67), through real Objective-C++ programs.

``tests/objc_programs/runtime_language.mm`` exercises the language (classes and metaclasses, categories,
protocols, non-fragile ivars over a framework class, properties, ``[super ...]``, ``+initialize``, struct and
floating-point returns, nil messaging, literals and subscripts, fast enumeration, reference counting and
autorelease pools, exceptions across C++ and Objective-C++ frames, ``@synchronized``, blocks and the GCD
stand-in) with a few hundred checks; it links ``runtime_plugin.mm``, a second shared object whose class,
category and selectors the program uses, so selectors meet across three objects (program, plugin,
framework). Everything is built with AddressSanitizer + UndefinedBehaviorSanitizer and run with
LeakSanitizer, so a memory error or a leak of the runtime fails the run. ``runtime_faults.mm`` proves the
checks live: a deliberate leak, a message after the last release and an uncaught exception are each reported.

Nothing is skipped: without clang 14 and libblocksruntime-dev the builds raise ObjCToolchainMissing, whose
message says what to install, and the tests fail with it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shimkit.objc import build
from shimkit.store import EnvironmentFailure

PROGRAMS = Path(__file__).parent / "objc_programs"
SANITIZER_ERRORS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def language_program(folder: Path, sanitize: bool) -> Path:
    plugin = build.compile_objc([PROGRAMS / "runtime_plugin.mm"], folder / "libruntime_plugin.so", sanitize=sanitize)
    return build.compile_objc([PROGRAMS / "runtime_language.mm"], folder / "runtime_language", executable=True,
                              sanitize=sanitize, extra_flags=[str(plugin), f"-Wl,-rpath,{folder}"])


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("objc-programs")
    faults = build.compile_objc([PROGRAMS / "runtime_faults.mm"], folder / "runtime_faults", executable=True,
                                sanitize=True)
    return {"language": language_program(folder, sanitize=True), "faults": faults}


def line_of(source: str, text: str) -> int:
    """The line of ``source`` (under tests/objc_programs) holding ``text``: where a report must point."""
    lines = (PROGRAMS / source).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def run(program: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=120,
                          env=build.sanitizer_environment())


def assert_all_checks_pass(done: subprocess.CompletedProcess) -> None:
    output = done.stdout + done.stderr
    assert not [line for line in output.splitlines() if line.startswith("FAIL")], output
    assert not any(error in output for error in SANITIZER_ERRORS), output
    assert done.returncode == 0, output
    passed = int(done.stdout.strip().splitlines()[-1].split()[1])
    assert done.stdout.strip().endswith(f"checks: {passed} passed, 0 failed") and passed >= 200, done.stdout


def test_language_checks_pass_under_the_sanitizers(programs):
    assert_all_checks_pass(run(programs["language"]))


def test_language_checks_pass_in_the_optimised_build(tmp_path):
    """The plain build (-O2, no sanitizers) is the one programs get by default: optimised callers keep values in
    registers across message sends, which objc_msgSend must hand on untouched."""
    assert_all_checks_pass(run(language_program(tmp_path, sanitize=False)))


def test_objects_kept_for_the_life_of_the_process_are_no_leak(programs):
    """Held by a global, by a static container whose destructor forgets them, or by a static whose destructor
    releases them after the main thread's autorelease pool is gone (and autoreleases on the way)."""
    done = run(programs["faults"], "clean")
    assert done.returncode == 0 and "clean" in done.stderr, done.stderr
    assert not any(error in done.stderr for error in SANITIZER_ERRORS), done.stderr


def test_a_leaked_object_is_reported_with_where_it_was_made(programs):
    done = run(programs["faults"], "leak")
    assert done.returncode != 0
    assert "ERROR: LeakSanitizer: detected memory leaks" in done.stderr, done.stderr
    leak = done.stderr.split("Direct leak", 1)[1]
    where = f"runtime_faults.mm:{line_of('runtime_faults.mm', 'never released')}"
    assert "class_createInstance" in leak and where in leak, done.stderr


def test_a_message_after_the_last_release_is_reported(programs):
    done = run(programs["faults"], "use-after-release")
    assert done.returncode != 0
    assert "ERROR: AddressSanitizer: heap-use-after-free" in done.stderr, done.stderr
    where = f"runtime_faults.mm:{line_of('runtime_faults.mm', '[array count]')}"
    assert "objc_msgSend" in done.stderr and where in done.stderr, done.stderr


def test_an_uncaught_exception_is_reported_with_its_name_and_reason(programs):
    done = run(programs["faults"], "uncaught")
    assert done.returncode != 0
    assert ("*** Terminating app due to uncaught exception 'NSInvalidArgumentException', reason: 'nobody catches 42'"
            in done.stderr), done.stderr


def test_a_missing_toolchain_says_what_to_install(monkeypatch):
    monkeypatch.setenv("SHIMKIT_OBJC_CXX", "clang++-that-does-not-exist")
    build.toolchain.cache_clear()
    try:
        with pytest.raises(build.ObjCToolchainMissing) as raised:
            build.framework_library()
    finally:
        monkeypatch.undo()
        build.toolchain.cache_clear()
    assert isinstance(raised.value, EnvironmentFailure) and isinstance(raised.value, RuntimeError)
    assert str(raised.value).startswith(
        "could not run: Objective-C++ needs clang-14 and libblocksruntime-dev "
        "(apt-get install clang-14 libblocksruntime-dev)")
