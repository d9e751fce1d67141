"""What a long run is doing, for whoever shows it: code that takes seconds names its stage
(``stage("building", done=3, total=12)``) under the name of what it works on (``working_on(model)``); the
``shimkit`` command listens unless ``--quiet`` (``listen``). Nothing listens by default, so a library
caller sees nothing and pays a global read per stage.

Workers forked by the audit inherit the listener, so a model audited in a worker says its stages too.

>>> seen = []
>>> listen(lambda subject, text: seen.append(f"{subject}: {text}"))
>>> with working_on("tiny_cnn"):
...     stage("building kernels", done=1, total=3)
>>> listen(None)
>>> seen
['tiny_cnn: building kernels 1 of 3']
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

Listener = Callable[[str, str], None]

_listener: Listener | None = None
_subject = ""


def listen(listener: Listener | None) -> None:
    """Send every stage from now on to ``listener(subject, text)`` (``None``: to nobody)."""
    global _listener
    _listener = listener


@contextlib.contextmanager
def working_on(subject: str) -> Iterator[None]:
    """Stages said inside are about ``subject`` (a model's name)."""
    global _subject
    outer, _subject = _subject, subject
    try:
        yield
    finally:
        _subject = outer


def stage(text: str, *, done: int | None = None, total: int | None = None) -> None:
    """Say that the work has reached ``text`` (with ``done`` of ``total`` steps, where it counts them)."""
    listener = _listener
    if listener is not None:
        listener(_subject, text if total is None else f"{text} {done} of {total}")
