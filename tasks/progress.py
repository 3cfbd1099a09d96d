"""A process-wide progress hook, so the CLI's Rich bar can follow work done in task threads.

Prefect parameters must be serializable, so a callback cannot travel as one;
the CLI (or a test) installs a listener here for the duration of a flow call
in the same process. With no listener, reporting costs nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str, int], None]
_listener: Listener | None = None
_lock = threading.Lock()


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Install ``listener``, called with (status, count) as attempts finish or are skipped."""
    global _listener  # noqa: PLW0603  (the process-wide hook is what this module is)
    _listener = listener
    try:
        yield
    finally:
        _listener = None


def attempt_done(status: str, count: int = 1) -> None:
    """Report that ``count`` attempts finished, stopped or were skipped (``status``)."""
    with _lock:
        if _listener is not None:
            _listener(status, count)
