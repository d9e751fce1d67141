"""Telling a real Ctrl-C from a ``KeyboardInterrupt`` that plugin or model code raises itself: the first
ends the command, the second is that code's error like any other (docs/reliability.md)."""

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
