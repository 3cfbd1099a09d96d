"""The one way tribunal runs an untrusted program (candidate, grader, command judge).

Why not ``subprocess.run(timeout=...)``: on timeout it kills only the direct
child, and Prefect's ``timeout_seconds`` kills nothing (shared/notes/prefect.md).
Here every program starts in a new session (its own process group); on
timeout, and again after it exits, the whole group is SIGKILLed, so
grandchildren cannot outlive the attempt or hold our pipes open. There is no
shell anywhere: argv goes straight to ``execve``. Output is read with a cap;
bytes past the cap are drained and counted, never kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

CHUNK = 65536


@dataclass(frozen=True)
class ProcessOutcome:
    """What happened to one program run; nothing here is interpreted yet."""

    argv: tuple[str, ...]
    started: str
    ended: str
    duration_s: float
    exit_code: int | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_overflow: int
    spawn_error: str | None = None

    @property
    def completed(self) -> bool:
        return self.spawn_error is None and not self.timed_out and self.exit_code == 0


def utc_timestamp() -> str:
    """UTC now, ISO-8601 with milliseconds and a Z."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _CappedReader(threading.Thread):
    """Drain a pipe to EOF, keeping at most ``cap`` bytes and counting the rest."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap = pipe, cap
        self.kept = bytearray()
        self.overflow = 0

    def run(self) -> None:
        while chunk := self.pipe.read1(CHUNK):  # type: ignore[attr-defined]
            room = self.cap - len(self.kept)
            self.kept += chunk[:room]
            self.overflow += max(0, len(chunk) - room)
        self.pipe.close()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_program(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: bytes,
    timeout_s: float,
    max_output_bytes: int,
    merge_stderr: bool = False,
) -> ProcessOutcome:
    """Run ``argv`` with exactly ``env``; kill its whole process group on timeout and at exit."""
    started, clock = utc_timestamp(), time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as error:
        return ProcessOutcome(tuple(argv), started, utc_timestamp(), 0.0, None, False, b"", b"", 0, error.strerror or str(error))
    assert process.stdout is not None and process.stdin is not None
    out = _CappedReader(process.stdout, max_output_bytes)
    err = _CappedReader(process.stderr, max_output_bytes) if process.stderr is not None else None
    for reader in (out, err):
        if reader is not None:
            reader.start()
    feeder = threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True)
    feeder.start()
    # A timer thread enforces the deadline so the wait below blocks in waitpid:
    # Popen.wait(timeout=...) polls with sleeps of up to 50 ms per program.
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(process.pid)

    timer = threading.Timer(timeout_s, expire)
    timer.start()
    process.wait()
    timer.cancel()
    timed_out = expired.is_set()
    _kill_group(process.pid)
    for thread in (feeder, out, err):
        if thread is not None:
            thread.join(timeout=5)
    return ProcessOutcome(
        argv=tuple(argv),
        started=started,
        ended=utc_timestamp(),
        duration_s=round(time.monotonic() - clock, 3),
        exit_code=None if timed_out else process.returncode,
        timed_out=timed_out,
        stdout=bytes(out.kept),
        stderr=bytes(err.kept) if err is not None else b"",
        stdout_overflow=out.overflow,
    )


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write stdin in a thread: a program that never reads must not block us."""
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass
