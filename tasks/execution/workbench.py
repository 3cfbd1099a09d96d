"""Where untrusted programs run, and how many run at once.

``--concurrency N`` bounds the candidates and graders *running* at the same
time, not the threads that prepare their work. Workspaces, redaction and
registry writes of one attempt overlap with another attempt's program, so the
N program slots never sit idle while Python-side work happens; that is what
keeps the evaluate flow within 1.5x of a plain loop of the same programs
(benchmarks/pipeline_bench.py).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Workbench:
    """A scratch directory for workspaces and the slots untrusted programs must hold to run.

    It also keeps the case templates built in its scratch directory (see
    ``tasks/execution/workspace.py``), so they live and die with it.
    """

    scratch: Path
    concurrency: int
    slots: threading.BoundedSemaphore
    templates: dict[str, Path] = field(default_factory=dict)
    templates_lock: threading.Lock = field(default_factory=threading.Lock)

    def __reduce__(self) -> tuple[object, tuple[int]]:
        """Sent to another process (a Dask worker), a workbench becomes that process's own, with as many slots.

        Slots and templates cannot be shared across processes; each worker
        process keeps one workbench for its lifetime instead.
        """
        return process_workbench, (self.concurrency,)

    @property
    def preparers(self) -> int:
        """Threads worth running: each slot gets a second thread preparing the next program's work."""
        return 2 * self.concurrency


@contextmanager
def workbench(concurrency: int, prefix: str = "tribunal-") -> Iterator[Workbench]:
    """A fresh scratch directory (removed afterwards) with ``concurrency`` program slots."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        slots = max(1, concurrency)
        yield Workbench(Path(scratch), slots, threading.BoundedSemaphore(slots))


_process_benches: dict[int, Workbench] = {}
_process_lock = threading.Lock()


def process_workbench(concurrency: int) -> Workbench:
    """This process's long-lived workbench with ``concurrency`` slots (its scratch is removed at exit)."""
    with _process_lock:
        if concurrency not in _process_benches:
            scratch = tempfile.mkdtemp(prefix="tribunal-worker-")
            atexit.register(shutil.rmtree, scratch, True)
            _process_benches[concurrency] = Workbench(Path(scratch), concurrency,
                                                      threading.BoundedSemaphore(concurrency))
        return _process_benches[concurrency]
