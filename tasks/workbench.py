"""Where untrusted programs run, and how many run at once.

``--concurrency N`` bounds the candidates and graders *running* at the same
time, not the threads that prepare their work. Workspaces, redaction and
registry writes of one attempt overlap with another attempt's program, so the
N program slots never sit idle while Python-side work happens; that is what
keeps the evaluate flow within 1.5x of a plain loop of the same programs
(benchmarks/pipeline_bench.py).
"""

from __future__ import annotations

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
    ``tasks/workspace.py``), so they live and die with it.
    """

    scratch: Path
    concurrency: int
    slots: threading.BoundedSemaphore
    templates: dict[str, Path] = field(default_factory=dict)
    templates_lock: threading.Lock = field(default_factory=threading.Lock)

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
