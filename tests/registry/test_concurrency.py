"""Many writers, one linear chain (SPEC §4; delta-rs concurrent.rs).

Four processes append 250 entries each, one commit per entry, to the same
registry. Put-if-absent on commit keys must leave seq 0..999 with no gap and
no duplicate, a valid chain, and every txn exactly once.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from registry import Registry, check_registry

WRITER = Path(__file__).with_name("writer.py")
WRITERS, APPENDS = 4, 250


@pytest.mark.slow
def test_four_processes_append_one_linear_chain(store_url: str) -> None:
    """Attack: racing writers must never both take a seq or fork the chain."""
    processes = [
        subprocess.Popen([sys.executable, str(WRITER), store_url, f"w{n}", str(APPENDS)], stderr=subprocess.PIPE)
        for n in range(WRITERS)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr.decode()[-2000:]
    registry = Registry.open(store_url)
    entries = registry.entries()
    assert [entry.seq for entry in entries] == list(range(WRITERS * APPENDS))
    txns = Counter(entry.txn for entry in entries)
    assert set(txns) == {f"w{n}-{i}" for n in range(WRITERS) for i in range(APPENDS)}
    assert set(txns.values()) == {1}
    per_writer = [[e.txn for e in entries if e.txn.startswith(f"w{n}-")] for n in range(WRITERS)]
    assert all(order == [f"w{n}-{i}" for i in range(APPENDS)] for n, order in enumerate(per_writer))
    report = check_registry(registry)
    assert report.findings == []
