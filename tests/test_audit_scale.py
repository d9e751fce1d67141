"""Auditing at scale: worker processes (-j), per-model timeouts, deterministic shards and merged reports."""

from __future__ import annotations

import io
import json
import os
import pty
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shimkit.audit.cli import _progress, configure_parser, run
from shimkit.audit.options import AuditOptions
from shimkit.audit.parallel import MergeError, audit_in_workers, merge_reports, shard

import argparse

SHIMKIT = str(Path(sys.executable).parent / "shimkit")

SLOW_MODEL = textwrap.dedent("""
    import time
    import torch

    class Slow(torch.nn.Module):
        def forward(self, x):
            time.sleep(60)  # export runs forward: this model never finishes within the test's timeout
            return x + 1

    def model():
        return Slow(), (torch.ones(2),)
""")


def audit(*argv: str) -> tuple[int, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", *argv]), stdout=stdout,
               stderr=stderr)
    return code, stdout.getvalue() or stderr.getvalue()


def test_shards_cover_every_model_exactly_once():
    specs = [f"m{i}" for i in range(11)]
    slices = [shard(specs, f"{k}/3") for k in (1, 2, 3)]
    assert sorted(sum(slices, [])) == sorted(specs)
    assert slices[0] == ["m0", "m3", "m6", "m9"]
    assert shard(specs, "1/1") == specs
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="--shard takes K/N"):
            shard(specs, bad)


def test_workers_give_one_report_and_a_slow_model_costs_only_itself(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    code, out = audit("-j", "2", "--timeout", "20", "--json", "seed_split_linear", f"{tmp_path / 'slow.py'}:model",
                      "cumsum")
    document = json.loads(out)
    statuses = {m["name"]: m["status"] for m in document["models"]}
    assert list(statuses) == ["seed_split_linear", f"{tmp_path / 'slow.py'}:model", "cumsum"]  # order kept
    assert statuses["seed_split_linear"] == "clean" and statuses["cumsum"] == "clean"
    slow = document["models"][1]
    assert slow["status"] == "error" and "--timeout" in slow["failure"]["message"]
    assert document["summary"]["models"] == 3 and document["summary"]["error"] == 1
    assert code == document["exit_code"] == 2


# Models that never finish, or take their process down: each is given a 600 s sleep or crash where a test's
# subprocess waits 120 s, so an audit that does not stop them fails the test by its timeout.
STUCK_MODELS = textwrap.dedent("""
    import ctypes
    import signal
    import time

    import torch


    class Sleeps(torch.nn.Module):
        def forward(self, x):
            time.sleep(600)
            return x + 1


    def sleeps():
        return Sleeps(), (torch.ones(2),)


    def hangs_in_native_code():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the alarm's handler never runs
        ctypes.CDLL(None).sleep(600)
        return torch.nn.ReLU(), (torch.ones(2),)


    class Crashes(torch.nn.Module):
        def forward(self, x):
            ctypes.string_at(0)  # SIGSEGV
            return x + 1


    def crashes():
        return Crashes(), (torch.ones(2),)


    def identity():  # nothing to compile, even under --execute
        return torch.nn.Identity(), (torch.ones(2),)
""")


def audit_subprocess(*argv: str) -> tuple[int, dict]:
    done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", *argv], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("model", ["sleeps", "hangs_in_native_code"])
@pytest.mark.parametrize("jobs", [None, "1"])
def test_timeout_holds_for_one_model_and_for_one_worker(tmp_path, model, jobs):
    # One model, or -j 1, was audited in the calling process, where --timeout was ignored.
    (tmp_path / "stuck.py").write_text(STUCK_MODELS)
    specs = [f"{tmp_path}/stuck.py:{model}"] + ([f"{tmp_path}/stuck.py:identity"] if jobs else [])
    # With the identity model, 20 s: it must be audited within it on a loaded machine too (2 s timed it out
    # under load). Alone, the stuck model never finishes, so a short timeout keeps the test from idling a core.
    seconds = "20" if jobs else "3"
    code, document = audit_subprocess("--timeout", seconds, *(["-j", jobs] if jobs else []), *specs)
    assert code == document["exit_code"] == 2
    stuck, *others = document["models"]
    assert (stuck["status"], stuck["failure"]["phase"]) == ("error", "timeout")
    assert f"within {seconds} s (--timeout)" in stuck["failure"]["message"]
    assert [m["status"] for m in others] == ["clean"] * len(others)


@pytest.mark.parametrize("option", [["--execute"], ["--timeout", "60"]])
def test_a_model_that_crashes_its_process_is_that_models_error(tmp_path, option):
    # --execute loads and runs compiled libraries: one that crashes takes down a worker, not the audit,
    # also for -j 1 and with no --timeout.
    (tmp_path / "stuck.py").write_text(STUCK_MODELS)
    code, document = audit_subprocess(*option, "-j", "1", f"{tmp_path}/stuck.py:crashes",
                                      f"{tmp_path}/stuck.py:identity")
    assert code == document["exit_code"] == 2
    crashed, identity = document["models"]
    assert crashed["status"] == "error" and crashed["failure"]["phase"] == "worker"
    assert f"exit code {-signal.SIGSEGV}, SIGSEGV" in crashed["failure"]["message"]
    assert identity["status"] == "clean"


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "inf"])
def test_a_timeout_that_bounds_nothing_is_refused_while_parsing(seconds):
    done = subprocess.run([SHIMKIT, "audit", "--timeout", seconds, "seed_split_linear"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith("usage: ") and "argument --timeout: takes a positive number" in done.stderr



@pytest.mark.parametrize("argv, said", [
    (["-j", "0"], "argument -j/--jobs: takes a positive number of workers, got '0'"),
    (["--shard", "3/2"], "argument --shard: takes K/N with integers 1 <= K <= N, got '3/2'"),
    (["--cache-dir", "/proc/nope"], "argument --cache-dir: '/proc/nope' cannot hold the cache: /proc is not writable ("),
    (["--cache-dir", "/etc/hostname/cache"], "'/etc/hostname/cache' cannot hold the cache: /etc/hostname is not a folder"),
    (["--frobnicate"], "shimkit audit: error: unrecognized arguments: --frobnicate"),
])
def test_bad_options_are_refused_with_the_audits_own_usage_before_anything_is_imported(argv, said):
    done = subprocess.run([SHIMKIT, "audit", *argv, "seed_split_linear"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 2 and not done.stdout
    assert "usage: shimkit audit " in done.stderr
    assert said in done.stderr.splitlines()[-1], done.stderr[-500:]
    assert "| torch\n" not in done.stderr  # -X importtime: torch was never imported


def test_quiet_means_nothing_on_stderr_not_even_the_libraries_import_chatter(tmp_path):
    # Importing ExecuTorch imports torchao, which logged two "Failed to load" lines, and torch logged a
    # pytree deprecation, on every run.
    done = subprocess.run([SHIMKIT, "audit", "--quiet", "--no-cache", "seed_split_linear"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "CLEAN" in done.stdout
    assert done.stderr == ""

def test_the_cache_answers_for_models_audited_in_a_worker(tmp_path):
    argv = ("--timeout", "60", "-j", "1", "--json", "--cache-dir", str(tmp_path / "cache"), "seed_split_linear")
    first, second = (json.loads(audit(*argv)[1])["models"][0] for _ in range(2))
    assert (first["status"], first["cached"]) == ("clean", False)
    assert (second["status"], second["cached"]) == ("clean", True)


def test_the_progress_line_shows_a_workers_own_time_not_the_wait_for_it():
    stream = io.StringIO()
    progress = _progress(stream)
    progress(0, 2, "a", None)
    progress(0, 2, "a", [{"name": "a", "status": "clean", "timings_s": {"total": 3.25}}])
    assert stream.getvalue() == "[1/2] a ... clean (3.25 s)\n"
    progress(1, 2, "b", None)  # a program of two methods: a line each, with its own time
    progress(1, 2, "b", [{"name": "b#encoder", "status": "clean", "timings_s": {"total": 1.5}},
                         {"name": "b#decoder", "status": "wrong", "timings_s": {"total": 2.0}}])
    assert stream.getvalue().endswith("[2/2] b ... 2 methods\n    b#encoder: clean (1.50 s)\n"
                                      "    b#decoder: wrong (2.00 s)\n")



def test_on_a_terminal_execute_says_what_it_is_doing_and_leaves_nothing_listening(tmp_path):
    # A real terminal: --execute audits in a forked worker, whose stages must reach it too.
    primary, secondary = pty.openpty()
    child = subprocess.Popen([SHIMKIT, "audit", "--execute", "--no-cache", "seed_split_linear"],
                             stdout=subprocess.DEVNULL, stderr=secondary)
    os.close(secondary)
    said = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal's last writer is gone
            break
        if not chunk:
            break
        said += chunk
    os.close(primary)
    assert child.wait(timeout=600) == 0, said
    text = said.decode()
    for stage in ("seed_split_linear: exporting", "seed_split_linear: compiling with Inductor",
                  "seed_split_linear: building kernels 1 of", "seed_split_linear: loading the weights",
                  "seed_split_linear: running eager", "seed_split_linear: running the lowered program"):
        assert stage in text, text
    assert "\r\x1b[K[1/1] seed_split_linear ... clean (" in text, text  # the stages' line rewritten


def _processes_whose_environment_holds(marker: str) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:  # gone, or not ours
            continue
    return found


def test_execute_compiles_the_runtimes_core_aside_and_stops_that_when_the_audit_ends(tmp_path):
    """--execute starts compiling the stand-in runtime's core in a process of its own before it imports
    torch; an audit that ends first (its model cannot be loaded) stops that process and the compiler it
    runs, and leaves no half-built entry in the build folder."""
    store = tmp_path / "build"
    done = subprocess.run([SHIMKIT, "audit", "--execute", "--quiet", f"{tmp_path}/missing.py:model"],
                          env={**os.environ, "SHIMKIT_BUILD_DIR": str(store)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert (store / "object-inputs").is_dir()  # it had started on the core's first unit
    assert not _processes_whose_environment_holds(f"SHIMKIT_BUILD_DIR={store}")
    assert not list(store.glob("*/.staging-*"))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stages_reach_a_terminal_unless_quiet_and_no_listener_outlives_the_run():
    import shimkit._progress as progress

    for quiet in (False, True):
        stderr = _Terminal()
        argv = [*(["--quiet"] if quiet else []), "seed_split_linear"]
        code = run(configure_parser(argparse.ArgumentParser()).parse_args(argv), stdout=io.StringIO(), stderr=stderr)
        assert code == 0 and progress._listener is None
        assert ("seed_split_linear: compiling with Inductor" in stderr.getvalue()) is not quiet, stderr.getvalue()


def test_a_model_that_kills_its_worker_is_that_models_error(tmp_path):
    (tmp_path / "dies.py").write_text("import os\n\ndef model():\n    os._exit(9)\n")
    code, out = audit("-j", "2", "--json", f"{tmp_path / 'dies.py'}:model", "seed_split_linear")
    document = json.loads(out)
    dies, clean = document["models"]
    assert dies["status"] == "error" and "died (exit code 9)" in dies["failure"]["message"]
    assert clean["status"] == "clean" and code == document["exit_code"] == 2


@pytest.mark.parametrize("where", ["progress after a model", "waiting for a worker"])
def test_ctrl_c_anywhere_in_a_parallel_run_keeps_the_models_done(where, tmp_path):
    # The signal can arrive while a progress line is written as well as while a worker is awaited: the
    # report covers the models done either way, and never loses them to an escaping KeyboardInterrupt.
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    specs = ["seed_split_linear", f"{tmp_path / 'slow.py'}:model", "cumsum"]

    def progress(index, total, spec, model):
        if where == "progress after a model" and model is not None:
            raise KeyboardInterrupt
        if where == "waiting for a worker" and index == 1:
            signal.setitimer(signal.ITIMER_REAL, 1.0)  # SIGALRM's handler below raises while get() waits

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        models, interrupted = audit_in_workers(specs, AuditOptions(), jobs=2, timeout=None, on_progress=progress)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted
    if where == "progress after a model":
        assert [m["status"] for m in models] == ["clean"]
    else:
        assert [m["status"] for m in models] == ["clean", "interrupted"]
        assert models[1]["name"] == specs[1] and "KeyboardInterrupt" in models[1]["failure"]["message"]


def test_shard_reports_merge_into_the_unsharded_result(tmp_path):
    models = ["seed_split_linear", "cumsum", "baddbmm"]
    paths = []
    for k in (1, 2):
        code, out = audit("-j", "1", "--no-plugins", "--json", "--shard", f"{k}/2", *models)
        paths.append(tmp_path / f"shard{k}.json")
        paths[-1].write_text(out)
    merged = merge_reports([str(p) for p in paths])
    assert sorted(m["name"] for m in merged["models"]) == sorted(models)
    assert merged["summary"]["missing_kernels"] == sorted(["at::_ops::cumsum::call", "aoti_torch_mps_baddbmm_out"])
    assert merged["exit_code"] == 1 and merged["summary"]["clean"] == 1
    code, out = audit("merge", *map(str, paths))
    assert code == 1 and "cumsum: MISSING" in out


def test_merge_refuses_what_it_cannot_combine(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"tool": "shimkit audit", "schema_version": 0, "models": []}))
    with pytest.raises(MergeError, match="a.json: schema version 0"):
        merge_reports([str(tmp_path / "a.json")])
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(MergeError, match="b.json: not a readable JSON report"):
        merge_reports([str(tmp_path / "b.json")])
    with pytest.raises(MergeError, match="at least one"):
        merge_reports([])
    code, out = audit("merge", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json: not a readable JSON report" in out
