"""SIGINT where shimkit must not be cut short: a real Ctrl-C told from a ``KeyboardInterrupt`` that plugin or
model code raises itself (the first ends the command, the second is that code's error like any other), and
Ctrl-C held over a block that must run whole (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


@contextlib.contextmanager
def telling_ctrl_c_apart() -> Iterator[list[int] | None]:
    """Within the block SIGINT acts as Python's default handler does (``KeyboardInterrupt``) and is also
    noted in the list yielded, so that a ``KeyboardInterrupt`` plugin code raises itself can be told from a
    real Ctrl-C. Where SIGINT is ignored (an audit worker, a background job) no Ctrl-C can raise one: the
    list stays empty. ``None`` where it cannot be watched (a thread other than the main one, a handler of
    the program's own): there every ``KeyboardInterrupt`` counts as a Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:
        yield []
        return
    if handler is not signal.default_int_handler:
        yield None
        return
    seen: list[int] = []

    def noting(signum: int, frame: Any) -> None:
        seen.append(signum)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, noting)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def is_ctrl_c(error: BaseException, seen: list[int] | None) -> bool:
    """Whether ``error``, caught inside :func:`telling_ctrl_c_apart` (``seen`` is what it yielded), is a real
    Ctrl-C that must end the command, not an error of the code that ran."""
    return isinstance(error, KeyboardInterrupt) and (seen is None or bool(seen))


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """SIGINT during the block is held, not raised; the list yielded collects the signals held. A process
    that ignores SIGINT (a background job) goes on ignoring it; off the main thread, where Python never
    runs a signal handler, nothing changes."""
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield held
        return
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)
