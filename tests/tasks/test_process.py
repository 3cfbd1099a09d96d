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


def start_time(pid: int) -> int:
    """A process's start time in clock ticks: with the pid, an identity that PID reuse cannot fake."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


GRANDCHILD = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              "tick = open(f'/proc/{child.pid}/stat').read().rsplit(')', 1)[1].split()[19]\n"
              "print(child.pid, tick, flush=True)\n")


def dies(pid: int, started: int, within_s: float = 30.0) -> bool:
    """Poll until the process ``(pid, started)`` is gone or a zombie; False if it still runs at the deadline."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return True
        if fields[0] in ("Z", "X") or int(fields[19]) != started:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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
    for timeout_s in (5, 30, 120):  # under load two interpreters may not start within 5 s: the try did not test
        outcome = run(tmp_path, GRANDCHILD + "time.sleep(600)\n", timeout_s=timeout_s)
        assert outcome.timed_out and outcome.exit_code is None and not outcome.completed
        if outcome.stdout:  # the grandchild was running when the deadline came
            break
    pid, started = map(int, outcome.stdout.split())
    assert dies(pid, started)


def test_a_grandchild_holding_our_pipe_does_not_keep_us_waiting(tmp_path: Path) -> None:
    """Attack: the program exits at once but leaves a background child holding stdout open."""
    began = time.monotonic()
    outcome = run(tmp_path, GRANDCHILD, timeout_s=300)
    assert outcome.completed and not outcome.timed_out
    assert time.monotonic() - began < 120  # the grandchild holds the pipe for 600 s, the timeout is 300 s
    assert dies(*map(int, outcome.stdout.split()))


def test_without_pidfd_the_exit_is_still_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Platforms without pidfds poll for the exit; the grandchild trick still cannot stall us."""
    monkeypatch.delattr(os, "pidfd_open")
    began = time.monotonic()
    outcome = run(tmp_path, GRANDCHILD + "print('done')\n", timeout_s=300)
    assert outcome.completed and outcome.stdout.endswith(b"done\n") and time.monotonic() - began < 120
    assert dies(*map(int, outcome.stdout.split()[:2]))


def test_an_unstartable_program_is_a_spawn_error(tmp_path: Path) -> None:
    outcome = run_program([str(tmp_path / "missing")], cwd=tmp_path, env={}, stdin=b"", timeout_s=5,
                          max_output_bytes=10)
    assert outcome.spawn_error and not outcome.completed and outcome.exit_code is None


def test_programs_wait_for_a_slot(tmp_path: Path) -> None:
    """With one slot, two programs never overlap (each program reports its own start and end)."""
    slot = threading.BoundedSemaphore(1)
    spans: list[tuple[float, float]] = []
    source = "import time\nbegun = time.time()\ntime.sleep(0.5)\nprint(begun, time.time())\n"

    def one() -> None:
        begun, ended = map(float, run(tmp_path, source, slot=slot).stdout.split())
        spans.append((begun, ended))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = sorted(spans)
    assert first[1] <= second[0]
