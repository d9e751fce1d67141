"""The one worker pool (shimkit.audit.workers) behind `shimkit audit -j` and the OpInfo sweep: results in
order, and a task that raises, hangs, swallows its timeout or kills its worker is that task's result only."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from shimkit.audit.workers import GRACE_S, TaskFailure, run_tasks


def behave(task: str) -> str:
    if task == "exit":
        os._exit(7)
    if task == "segfault":
        faulthandler.disable()  # pytest's traceback dump on a fatal signal: noise here, the death is the point
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "raise":
        raise ValueError("bad input")
    if task == "interrupt":  # model or plugin code raising it, not a Ctrl-C
        raise KeyboardInterrupt("from the task")
    if task == "sys.exit":
        sys.exit(3)
    if task == "hang":
        time.sleep(60)
    if task == "swallow":
        try:
            time.sleep(60)
        except BaseException:  # a task that catches everything still times out
            pass
    return f"{task}:{os.getpid()}"


def as_failure(task: str, failure: TaskFailure) -> tuple[str, str, str]:
    return task, failure.phase, failure.message


def test_every_failure_is_that_tasks_result_and_order_is_kept():
    tasks = ["a", "exit", "raise", "hang", "segfault", "swallow", "interrupt", "sys.exit", "b"]
    results, interrupted = run_tasks(behave, tasks, jobs=2, timeout=3, on_failure=as_failure)
    assert not interrupted
    assert [r.split(":")[0] if isinstance(r, str) else r[0] for r in results] == tasks
    failures = {r[0]: r[1:] for r in results if isinstance(r, tuple)}
    assert failures["exit"] == ("worker", "its worker process died (exit code 7) before giving a result")
    assert failures["segfault"] == ("worker", f"its worker process died (exit code {-signal.SIGSEGV}, SIGSEGV) "
                                              f"before giving a result")
    assert failures["raise"] == ("worker", "ValueError: bad input")
    assert failures["interrupt"] == ("worker", "KeyboardInterrupt: from the task")
    assert failures["sys.exit"] == ("worker", "SystemExit: 3")
    assert failures["hang"][0] == failures["swallow"][0] == "timeout"
    assert "within 3 s (--timeout)" in failures["hang"][1]


NATIVE_HANG = textwrap.dedent("""
    import ctypes, json, signal, subprocess, sys
    from shimkit.audit.workers import run_tasks

    def task(name):
        if name == "hang":  # what a hang in C looks like: the alarm's handler never runs
            started = subprocess.Popen(["sleep", "600"])  # as a compiler the task started
            open(sys.argv[1], "w").write(str(started.pid))
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            ctypes.CDLL(None).pause()
        return name

    def running(pid):
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    results, _ = run_tasks(task, ["hang", "after"], jobs=1, timeout=1,
                           on_failure=lambda name, failure: [failure.phase, failure.message])
    print(json.dumps([results, running(int(open(sys.argv[1]).read()))]))
""")


def test_a_hang_in_native_code_is_stopped_shortly_after_the_timeout(tmp_path):
    # Bounded by the subprocess's timeout, far below the 600 s a hang costs: the caller kills the worker
    # GRACE_S seconds after the timeout, with the processes it started, and a fresh worker takes the next task.
    done = subprocess.run([sys.executable, "-c", NATIVE_HANG, str(tmp_path / "pid")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    [(phase, message), after], still_running = json.loads(done.stdout)
    assert (phase, after) == ("timeout", "after") and not still_running
    assert f"nor {GRACE_S:g} s after (a hang in native code" in message


def _slow_to_start() -> None:
    time.sleep(GRACE_S + 2)


def test_a_workers_start_does_not_count_against_its_first_tasks_timeout():
    # A spawned worker imports torch before its first task (seconds): the caller counts a task's time from
    # when the worker says it started it, so the start cannot get the worker killed as a native hang.
    results, _ = run_tasks(behave, ["a"], jobs=1, timeout=1, initializer=_slow_to_start, on_failure=as_failure)
    assert results[0].startswith("a:"), results


def test_workers_are_forked_reused_and_retired():
    results, _ = run_tasks(behave, list("abcd"), jobs=1, on_failure=as_failure)
    assert len({r.split(":")[1] for r in results}) == 1 and os.getpid() != int(results[0].split(":")[1])
    results, _ = run_tasks(behave, list("abcd"), jobs=1, tasks_per_worker=2, on_failure=as_failure)
    assert [len({r.split(":")[1] for r in results[i:i + 2]}) for i in (0, 2)] == [1, 1]
    assert results[0].split(":")[1] != results[2].split(":")[1]


FORKED_FROM_THE_TEST = []


def forked(task: str) -> bool:
    return FORKED_FROM_THE_TEST == [task]


def test_workers_on_a_machine_with_a_cuda_gpu_start_afresh(monkeypatch):
    # A forked child of a process that has asked CUDA anything fails at its first CUDA call (torch.export
    # makes one on a GPU machine): there, workers start afresh and see none of the caller's state.
    import torch

    FORKED_FROM_THE_TEST[:] = ["a"]
    try:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine that has one
        assert run_tasks(forked, ["a"], jobs=1, on_failure=as_failure) == ([True], False)
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert run_tasks(forked, ["a"], jobs=1, on_failure=as_failure) == ([False], False)
    finally:
        FORKED_FROM_THE_TEST.clear()


def test_progress_announces_and_reports_each_task_in_order():
    seen = []
    run_tasks(behave, ["a", "raise", "b"], jobs=2, on_failure=as_failure,
              on_progress=lambda index, total, task, result: seen.append((index, total, task, result is None)))
    assert seen == [(0, 3, "a", True), (0, 3, "a", False), (1, 3, "raise", True), (1, 3, "raise", False),
                    (2, 3, "b", True), (2, 3, "b", False)]


def test_bad_worker_counts_are_refused():
    with pytest.raises(ValueError, match="jobs=0"):
        run_tasks(behave, ["a"], jobs=0, on_failure=as_failure)


INTERRUPTED_RUN = textwrap.dedent("""
    import json, sys, time
    from shimkit.audit.workers import run_tasks

    def nap(task):
        time.sleep(0.15)
        return task

    def progress(index, total, task, result):
        if result is None:
            print("waiting", index, file=sys.stderr, flush=True)

    results, interrupted = run_tasks(nap, list(range(12)), jobs=2, on_progress=progress,
                                     on_failure=lambda task, failure: {"interrupted": task, "phase": failure.phase})
    print(json.dumps({"results": results, "interrupted": interrupted}))
""")


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.01, 0.05, 0.2, 0.35, 0.5, 0.7, 0.9])
def test_ctrl_c_to_the_process_group_at_any_moment_keeps_what_finished(delay):
    # The whole group gets SIGINT, as from a terminal: the workers ignore it, the caller stops and returns
    # the results in order, ending with the task it was waiting for.
    process = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    while "waiting" not in process.stderr.readline():  # imports done, the pool is running
        pass
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGINT)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0, stdout
    document = json.loads(stdout)
    results = document["results"]
    finished = [r for r in results if not isinstance(r, dict)]
    assert finished == list(range(len(finished)))
    if document["interrupted"]:
        assert results[len(finished):] in ([], [{"interrupted": len(finished), "phase": "interrupted"}])
    else:
        assert finished == list(range(12))


def _hold_the_progress_lock(_task):
    from tqdm.std import tqdm

    tqdm.get_lock().acquire()  # never released: the worker is stopped past its timeout holding it
    time.sleep(60)


def test_a_worker_stopped_holding_tqdms_lock_leaves_the_callers_progress_bars_working():
    """tqdm's default lock holds a semaphore shared by forked processes; a worker stopped while holding it
    left the caller's next progress bar (torch.fx draws them) waiting forever: CI hung on it once."""
    import threading

    from tqdm.std import tqdm

    tqdm(total=1, disable=True).close()
    tqdm.get_lock()  # the caller's lock, semaphore included, exists before the fork
    failures = []
    run_tasks(_hold_the_progress_lock, [0], jobs=1, timeout=1,
              on_failure=lambda *failure: failures.append(failure))
    assert failures and failures[0][1].phase == "timeout", failures
    drawn = threading.Thread(target=lambda: tqdm(total=1, disable=True).close(), daemon=True)
    drawn.start()
    drawn.join(60)  # a deadlock detector, not a speed bound: the bar takes microseconds
    assert not drawn.is_alive(), "the caller's progress bar is still waiting for tqdm's lock"
