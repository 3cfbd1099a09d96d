"""Doctor's work on every core: independent pieces run in the calling process and in worker processes.

Doctor decodes every commit and verifies every object and signature; at
100,000 attempts that is minutes of CPU in one process, and no piece depends
on another. Workers are started with ``spawn`` (never ``fork``: the caller
may be a Prefect flow with threads running) and only for a log long enough
to pay for their start-up (about a second each); the calling process works
too, so ``count`` cores are busy with ``count - 1`` workers. Results come
back in the order of the pieces whoever computed them, so findings read the
same however many processes ran.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType
from typing import TypeVar

from registry._memory import tune_allocators

A = TypeVar("A")
R = TypeVar("R")

PROCESSES_ENV = "TRIBUNAL_DOCTOR_PROCESSES"
PARALLEL_FROM = 10_000
"""Commits below which one process does everything: decoding them takes about as long as starting a worker."""


def _cores() -> int:
    """``$TRIBUNAL_DOCTOR_PROCESSES``, else the cores this process may run on."""
    configured = os.environ.get(PROCESSES_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _start_worker() -> None:
    """A worker runs doctor's pieces only: memory tuned as in the caller, the collector paused."""
    tune_allocators()
    gc.disable()


class Workers:
    """The processes one doctor run spreads its pieces over: the caller, and ``count - 1`` workers."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._pool: ProcessPoolExecutor | None = None
        self._collecting = False

    @classmethod
    def for_log(cls, commits: int) -> Workers:
        """One process per core for a log of at least ``PARALLEL_FROM`` commits, else the caller alone."""
        return cls(_cores() if commits >= PARALLEL_FROM else 1)

    def __enter__(self) -> Workers:
        self._collecting = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._collecting:
            gc.enable()

    def run_all(self, work: Callable[[A], R], pieces: Iterable[A]) -> list[R]:
        """``work`` applied to every piece, results in the pieces' order.

        The caller takes the next piece itself whenever each worker has two
        queued, so neither side waits for the other and only a few pieces are
        in flight between processes at once (pieces are made as they are taken).
        """
        if self.count <= 1:
            return [work(piece) for piece in pieces]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.count - 1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker)
        done: dict[int, R] = {}
        queued: dict[int, Future[R]] = {}
        for index, piece in enumerate(pieces):
            for finished in [number for number, future in queued.items() if future.done()]:
                done[finished] = queued.pop(finished).result()
            if len(queued) < 2 * (self.count - 1):
                queued[index] = self._pool.submit(work, piece)
            else:
                done[index] = work(piece)
        for index, future in queued.items():
            done[index] = future.result()
        return [done[index] for index in range(len(done))]
