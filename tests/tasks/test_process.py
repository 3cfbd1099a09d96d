"""The one runner of untrusted programs: real subprocesses, each misbehaving in its own way."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from tasks.execution import process
from tasks.execution.process import run_program


def run(tmp_path: Path, source: str, stdin: bytes = b"", timeout_s: float = 20, cap: int = 1 << 20,
        **options: object) -> process.ProcessOutcome:
    script = tmp_path / "program.py"
    script.write_text(source)
    return run_program([sys.executable, str(script)], cwd=tmp_path, env={"PATH": os.environ["PATH"]}, stdin=stdin,
                       timeout_s=timeout_s, max_output_bytes=cap, **options)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def test_stdin_larger_than_a_pipe_round_trips(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    outcome = run(tmp_path, "import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read())\n", stdin=data, cap=4 << 20)
    assert outcome.completed and outcome.stdout == data


def test_a_program_that_never_reads_stdin_does_not_block_us(tmp_path: Path) -> None:
    outcome = run(tmp_path, "print('ignored you')\n", stdin=os.urandom(4 << 20))
    assert outcome.completed and outcome.stdout == b"ignored you\n"


def test_exit_code_and_separate_or_merged_stderr(tmp_path: Path) -> None:
    source = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n"
    apart = run(tmp_path, source)
    assert (apart.exit_code, apart.stdout, apart.stderr, apart.completed) == (3, b"out\n", b"err\n", False)
    merged = run(tmp_path, source, merge_stderr=True)
    assert sorted(merged.stdout.splitlines()) == [b"err", b"out"] and merged.stderr == b""


def test_output_past_the_cap_is_counted_not_kept(tmp_path: Path) -> None:
    outcome = run(tmp_path, "import sys\nsys.stdout.write('x' * 100000)\n", cap=1000)
    assert outcome.completed and outcome.stdout == b"x" * 1000 and outcome.stdout_overflow == 99000


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    """Attack: a program and a grandchild both sleeping past the deadline."""
    source = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(child.pid, flush=True)\ntime.sleep(60)\n")
    started = time.monotonic()
    outcome = run(tmp_path, source, timeout_s=1.5)
    assert outcome.timed_out and outcome.exit_code is None and not outcome.completed
    assert time.monotonic() - started < 10
    grandchild = int(outcome.stdout.split()[0])
    time.sleep(0.2)
    assert not alive(grandchild)


def test_a_grandchild_holding_our_pipe_does_not_keep_us_waiting(tmp_path: Path) -> None:
    """Attack: the program exits at once but leaves a background child holding stdout open."""
    source = ("import subprocess, sys\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(child.pid, flush=True)\n")
    started = time.monotonic()
    outcome = run(tmp_path, source, timeout_s=30)
    assert outcome.completed and time.monotonic() - started < 5
    time.sleep(0.2)
    assert not alive(int(outcome.stdout.split()[0]))


def test_without_pidfd_the_exit_is_still_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Platforms without pidfds poll for the exit; the grandchild trick still cannot stall us."""
    monkeypatch.delattr(os, "pidfd_open")
    source = ("import subprocess, sys\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\nprint('done')\n")
    started = time.monotonic()
    outcome = run(tmp_path, source, timeout_s=30)
    assert outcome.completed and outcome.stdout == b"done\n" and time.monotonic() - started < 5


def test_an_unstartable_program_is_a_spawn_error(tmp_path: Path) -> None:
    outcome = run_program([str(tmp_path / "missing")], cwd=tmp_path, env={}, stdin=b"", timeout_s=5,
                          max_output_bytes=10)
    assert outcome.spawn_error and not outcome.completed and outcome.exit_code is None


def test_programs_wait_for_a_slot(tmp_path: Path) -> None:
    """With one slot, two programs never overlap."""
    slot = threading.BoundedSemaphore(1)
    spans: list[tuple[float, float]] = []

    def one() -> None:
        begun = time.monotonic()
        run(tmp_path, "import time\ntime.sleep(0.5)\n", slot=slot)
        spans.append((begun, time.monotonic()))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (_, first_end), (_, second_end) = sorted(spans, key=lambda span: span[1])
    assert second_end - first_end >= 0.45
