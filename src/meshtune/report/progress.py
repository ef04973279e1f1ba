"""A progress line for searches that take a while (rich; only :mod:`meshtune.report` and
:mod:`meshtune.cli` import rich).

:func:`working` shows a spinner with a message on standard error once the work has taken
longer than ``after_s`` (default one second), and only when standard error is a terminal: a
pipe or a CI log gets nothing, and a quick command never flickers one. The spinner is
transient: it disappears when the work ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

DELAY_S = 1.0


@contextmanager
def working(
    message: str, *, after_s: float = DELAY_S, console: Console | None = None
) -> Iterator[None]:
    """Run the ``with`` body; after ``after_s`` seconds show ``message`` with a spinner on
    ``console`` (default: standard error) if it is a terminal, until the body ends."""
    out = console or Console(stderr=True)
    if not out.is_terminal:
        yield
        return
    from rich.status import Status  # here: a pipe or CI log never pays for rich.live

    status = Status(message, console=out)
    lock = threading.Lock()
    state = {"done": False, "shown": False}

    def show() -> None:
        with lock:
            if not state["done"]:
                status.start()
                state["shown"] = True

    timer = threading.Timer(after_s, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["shown"]:
                status.stop()
