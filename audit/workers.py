"""One pool of worker processes for everything the audit runs many of, or must be able to stop: models under
``shimkit audit -j``, ``--timeout`` or ``--execute`` (:func:`shimkit.audit.parallel.audit_in_workers`) and
OpInfo ops in the coverage sweep (:func:`shimkit.audit.coverage.sweep`).

Workers are forked from the caller, as torch's DataLoader forks its workers, so that none pays the seconds
of importing torch, ExecuTorch and Inductor again (``start_method="spawn"`` starts fresh interpreters, for
work a fork cannot carry, such as a CUDA context). On a machine with a CUDA GPU workers are always spawned:
once the caller has asked CUDA anything (``torch.cuda.is_available()`` is enough, and ``torch.export``
asks it) a forked child fails at its first CUDA call, which ``torch.export`` makes there (dynamo saves
every device's RNG state around a trace). Each worker takes one task at a time over a pipe, under
an alarm of ``timeout`` seconds. What can go wrong with a task is that task's result, through the caller's
``on_failure``, and the other tasks go on:

* the task raises: phase ``"worker"``, the exception's type and message (``SystemExit`` and a
  ``KeyboardInterrupt`` the task raises itself too: workers ignore SIGINT, so no real Ctrl-C lands there);
* the task runs past ``timeout``: phase ``"timeout"`` (a hang in native code, which the alarm cannot stop,
  is given up ``GRACE_S`` seconds later and its worker killed);
* the worker process dies (a segfault, ``os._exit``): phase ``"worker"``, with its exit code (and the
  signal's name); a new worker takes the next task;
* Ctrl-C in the caller: the results so far are returned, the task being waited for is reported with phase
  ``"interrupted"``, and every worker is stopped. Workers ignore SIGINT themselves, so a Ctrl-C sent to
  the whole process group (as a terminal does) reaches only the caller.

Results come back in the order of ``tasks``, and ``on_progress`` sees them in that order.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence, TypeVar

from shimkit._interrupts import interrupts_held

Task = TypeVar("Task")
Result = TypeVar("Result")

# How long past ``timeout`` the caller waits for a worker before killing it: the worker's own alarm stops a
# Python-level hang at ``timeout`` and its answer takes milliseconds, so this only has to cover the unwinding
# of the task's ``finally`` blocks and a loaded machine; a hang in native code, where no signal handler runs,
# then costs the timeout and a few seconds, not minutes.
GRACE_S = 5.0


class TaskTimeout(BaseException):
    """Raised in a worker when its task runs past the pool's timeout. A ``BaseException``, like
    ``KeyboardInterrupt``, so that a task's own ``except Exception`` does not swallow it."""


@dataclass(frozen=True)
class TaskFailure:
    """Why a task has no result of its own: ``phase`` is ``"timeout"``, ``"worker"`` or ``"interrupted"``;
    ``seconds`` is how long it ran, as far as the caller saw."""

    phase: str
    message: str
    seconds: float


def run_tasks(function: Callable[[Task], Result], tasks: Sequence[Task], *, jobs: int,
              on_failure: Callable[[Task, TaskFailure], Result], timeout: float | None = None,
              start_method: str = "fork", tasks_per_worker: int | None = None,
              initializer: Callable[[], None] | None = None,
              on_progress: Callable[[int, int, Task, Result | None], None] | None = None,
              ) -> tuple[list[Result], bool]:
    """``function(task)`` for every task in ``jobs`` worker processes: the results in the order of
    ``tasks``, and whether Ctrl-C cut the run short (the results then end with the interrupted task).

    ``function`` and ``initializer`` (run once in each new worker) must be importable module-level
    callables (or ``functools.partial`` of one) when ``start_method`` is ``"spawn"``; results must pickle.
    ``tasks_per_worker`` retires a worker after that many tasks (memory a task leaks goes with it; 1 gives
    every task a fresh process). ``on_progress(index, total, task, None)`` announces the task the run waits
    for next, ``on_progress(index, total, task, result)`` its result.

    >>> results, interrupted = run_tasks(abs, [-1, 2, -3], jobs=2, on_failure=lambda task, failure: None)
    >>> results, interrupted
    ([1, 2, 3], False)
    """
    if jobs < 1:
        raise ValueError(f"run_tasks needs at least one worker, got jobs={jobs}")
    total = len(tasks)
    results: dict[int, Result] = {}
    waiting: deque[int] = deque(range(total))
    workers: list[_Worker] = []
    if start_method == "fork" and _has_cuda_gpu():
        start_method = "spawn"
    context = multiprocessing.get_context(start_method)
    reported = 0
    waited_for = -1  # the task whose result the run is waiting for, once its announcement is made
    try:
        if on_progress and total:
            on_progress(0, total, tasks[0], None)
        waited_for = 0
        while reported < total:
            while waiting and sum(w.busy for w in workers) < jobs:
                worker = next((w for w in workers if not w.busy and w.process.is_alive()), None)
                if worker is None:
                    worker = _Worker(context, function, timeout, initializer)
                    workers.append(worker)
                worker.give(waiting.popleft(), tasks)
            for worker in _ready(workers, timeout):
                index, outcome = worker.collect(timeout)
                if outcome is None:
                    continue
                results[index] = outcome[1] if outcome[0] == "ok" else on_failure(tasks[index], outcome[1])
                if not worker.alive or (tasks_per_worker and worker.tasks_done >= tasks_per_worker):
                    worker.stop()
                    workers.remove(worker)
            while reported in results:
                reported += 1  # before the progress call: a Ctrl-C inside it keeps this result
                if on_progress:
                    on_progress(reported - 1, total, tasks[reported - 1], results[reported - 1])
                    if reported < total:
                        on_progress(reported, total, tasks[reported], None)
                waited_for = reported
    except KeyboardInterrupt:
        # Ctrl-C lands anywhere in the loop, a progress line included: the results reported are kept, and
        # the task waited for, if any, is reported as interrupted.
        done = [results[i] for i in range(reported)]
        if waited_for == reported < total:
            done.append(on_failure(tasks[reported], TaskFailure("interrupted", "KeyboardInterrupt: interrupted",
                                                            _running_for(workers, reported))))
        return done, True
    finally:
        for worker in workers:
            worker.stop()
    return [results[i] for i in range(total)], False


def _has_cuda_gpu() -> bool:
    torch = sys.modules.get("torch")  # a caller without torch has no CUDA state to pass on
    return torch is not None and torch.backends.cuda.is_built() and torch.cuda.is_available()


def _ready(workers: list[_Worker], timeout: float | None) -> list[_Worker]:
    """The workers with something to collect: a message, a death, or a task past its grace period."""
    busy = [w for w in workers if w.busy]
    if not busy:
        return []
    running = [w.started for w in busy if w.running]
    deadline = None if timeout is None or not running else min(running) + timeout + GRACE_S - time.monotonic()
    handles = [h for w in busy for h in (w.connection, w.process.sentinel)]
    ready = set(wait(handles, timeout=None if deadline is None else max(deadline, 0.0)))
    return [w for w in busy if w.connection in ready or w.process.sentinel in ready or w.overdue(timeout)]


def _running_for(workers: list[_Worker], index: int) -> float:
    return next((time.monotonic() - w.started for w in workers if w.busy and w.index == index), 0.0)


class _Worker:
    """One worker process and the caller's end of its pipe."""

    def __init__(self, context: Any, function: Callable, timeout: float | None,
                 initializer: Callable[[], None] | None) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid(), function, timeout, initializer),
                                       daemon=True)
        # A Ctrl-C landing in fork's at-fork hooks (logging's lock release) was printed as an ignored
        # exception and lost: held over the fork, then delivered to whoever listens.
        with interrupts_held() as held:
            self.process.start()
        child.close()
        self.index = -1
        self.started = 0.0
        # Whether the worker has said it started the task held: until then it may still be starting (a
        # spawned worker imports torch for seconds), time that counts against no task's timeout.
        self.running = False
        self.tasks_done = 0
        self.alive = True
        if held:
            signal.raise_signal(signal.SIGINT)

    @property
    def busy(self) -> bool:
        return self.index >= 0

    def overdue(self, timeout: float | None) -> bool:
        return self.running and timeout is not None and time.monotonic() - self.started > timeout + GRACE_S

    def give(self, index: int, tasks: Sequence[Any]) -> None:
        self.index, self.started, self.running = index, time.monotonic(), False
        try:
            self.connection.send(tasks[index])
        except OSError:
            pass  # the worker died since its last task: collect() reports the death as this task's

    def collect(self, timeout: float | None) -> tuple[int, tuple[str, Any] | None]:
        """``(index, outcome)`` for the task this worker held: ``("ok", result)`` or ``("failed", TaskFailure)``;
        ``None`` when it has nothing yet."""
        index = self.index
        try:
            while self.connection.poll():
                kind, payload, seconds = self.connection.recv()
                if kind == "started":
                    self.started, self.running = time.monotonic(), True
                    continue
                self.index, self.running, self.tasks_done = -1, False, self.tasks_done + 1
                if kind == "ok":
                    return index, ("ok", payload)
                return index, ("failed", TaskFailure(kind, payload, seconds))
        except (EOFError, OSError):
            pass  # the worker died mid-message: reported below like any death
        if self.process.is_alive() and not self.overdue(timeout):
            return index, None
        seconds = time.monotonic() - self.started
        self.alive, self.index, self.running = False, -1, False
        if self.process.is_alive():
            return index, ("failed", TaskFailure("timeout", f"did not finish within {timeout:g} s (--timeout), nor "
                                             f"{GRACE_S:g} s after (a hang in native code, which the alarm "
                                             f"cannot stop); its worker was killed", seconds))
        self.process.join()
        return index, ("failed", TaskFailure("worker", f"its worker process died ({_exit_of(self.process.exitcode)}) "
                                         f"before giving a result", seconds))

    def stop(self) -> None:
        if self.process.is_alive():
            # The worker leads a process group of its own: the compilers it started go with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.kill()
        if self.process.pid is not None:
            self.process.join()
        self.connection.close()


def _exit_of(code: int) -> str:
    """``exit code -11, SIGSEGV``: a negative exit code is the signal that killed the process."""
    if code < 0:
        with contextlib.suppress(ValueError):  # a number Python has no name for (a real-time signal)
            return f"exit code {code}, {signal.Signals(-code).name}"
    return f"exit code {code}"


def _progress_lock_of_its_own() -> None:
    """tqdm's default lock holds a multiprocessing semaphore that every forked process shares, and
    torch.fx's Interpreter draws a progress bar under it: a worker killed past its timeout while holding
    it left it taken, and the caller's next progress bar waited forever (a CI run hung in
    test_audit_scale.py). A worker takes a lock that is its own."""
    progress = sys.modules.get("tqdm.std")
    if progress is not None:
        progress.tqdm.set_lock(threading.RLock())


def _serve(connection: Connection, caller: int, function: Callable, timeout: float | None,
           initializer: Callable[[], None] | None) -> None:
    """A worker's life: run each task it is sent, send back ``(kind, payload, seconds)``; end with the
    caller (a forked worker holds copies of the caller's ends of every pipe, so the caller's death is not
    always an end of file here)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    os.setpgrp()  # so that stopping it stops what it started (a compiler under --execute) too
    _progress_lock_of_its_own()
    if initializer:
        initializer()
    expired = False

    def expire(signum: int, frame: Any) -> None:
        nonlocal expired
        expired = True
        raise TaskTimeout

    signal.signal(signal.SIGALRM, expire)
    while True:
        try:
            while not connection.poll(1.0):
                if os.getppid() != caller:
                    return
            task = connection.recv()
        except EOFError:
            return
        expired = False
        started = time.monotonic()
        connection.send(("started", None, 0.0))  # the caller's deadline counts from here
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        timed_out = ("timeout", f"did not finish within {timeout:g} s (--timeout); the other results are kept"
                     if timeout is not None else "")
        try:
            message: tuple[str, Any] = ("ok", function(task))
        except TaskTimeout:
            message = timed_out
        except (Exception, SystemExit, KeyboardInterrupt) as error:
            # A worker ignores SIGINT, so a KeyboardInterrupt here was raised by the task's own code: its error.
            message = ("worker", f"{type(error).__name__}: {error}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if expired:  # also where the task caught TaskTimeout itself and went on
            message = timed_out
        connection.send((*message, time.monotonic() - started))
