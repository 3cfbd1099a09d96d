"""A segment records the sha256 of each commit file it replaces; doctor reads those commits through it.

Doctor must compare every segment readers use with the commits it stands for
(SPEC §12), but decoding 200,000 commit files is most of its time. A writer
that closes a segment records the digest of each commit file's bytes in it;
doctor then hashes those files instead of decoding them, decodes only the
last one, and checks the segment's rows like commits (entry hashes, links).
Each test plants what a careless or hostile writer could, and doctor must
find what it found when it decoded every commit.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import registry._log as log_module
import registry._manifest as manifest_module
from registry import ManifestCorrupt, NewEntry, Registry, check_registry, digest
from registry._entry import entry_hash
from registry._manifest import COMMITS_KEY, commit_key, segment_key
from registry._parquet import decode_table, encode_table
from registry._storage import LocalStorage
from tests.registry.test_doctor import build, read_rows, write_rows


@pytest.fixture(autouse=True)
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_module, "SEGMENT_COMMITS", 2)
    monkeypatch.setattr(log_module, "PIECE_COMMITS", 2)


def recorded(registry: Registry, first: int, last: int) -> list[str]:
    key = segment_key(first, last)
    metadata = decode_table(registry.storage.read(key), key).schema.metadata or {}
    return metadata.get(COMMITS_KEY, b"").decode().split()


def rewrite_segment(raw: Any, registry: Registry, first: int, last: int, rows: list[dict[str, Any]] | None = None,
                    record: list[str] | None = None) -> None:
    """Write segment ``first..last`` again: other rows and/or another record (None: keep what it holds)."""
    key = segment_key(first, last)
    table = decode_table(registry.storage.read(key), key)
    kept = table.schema.metadata or {}
    if rows is not None:
        table = table.from_pylist(rows, schema=table.schema)
    metadata = {**kept, COMMITS_KEY: "\n".join(record).encode()} if record is not None else kept
    raw(registry).write(key, encode_table(table, metadata, compression="zstd"))


def findings_of(url: str) -> list[tuple[str, int | None, int | None]]:
    return [(f.kind, f.seq, f.version) for f in check_registry(Registry.open(url)).findings]


def test_a_closed_segment_records_the_sha256_of_each_commit_file(store_url: str) -> None:
    registry = build(store_url, commits=4)
    for first, last in ((0, 1), (2, 3)):
        assert recorded(registry, first, last) == [digest(registry.storage.read(commit_key(version)))
                                                   for version in range(first, last + 1)]


def test_doctor_decodes_only_the_last_commit_of_a_recorded_segment(store_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    registry = build(store_url, commits=5)
    decoded: list[str] = []

    def counting(data: bytes, where: str) -> Any:
        decoded.append(where)
        return decode_table(data, where)

    monkeypatch.setattr(log_module, "decode_table", counting)
    assert check_registry(Registry.open(registry.url)).clean
    assert sorted(where for where in decoded if where.startswith("log/")) == [
        commit_key(1), commit_key(3), commit_key(4)]


def test_a_commit_edited_under_a_recorded_segment_is_found(store_url: str, raw: Any) -> None:
    """Attack: an entry inside a segment's commits edited with its hash kept; readers of the commits would read it."""
    registry = build(store_url, commits=4)
    rows = read_rows(registry, 2)
    rows[0]["role"] = "grader-result"
    write_rows(raw, registry, 2, rows)
    assert findings_of(store_url) == [("entry-hash-mismatch", 2, None), ("segment-mismatch", None, 2)]


def test_segment_rows_edited_under_a_kept_record_are_found_as_before(store_url: str, raw: Any) -> None:
    """Attack: the segment's rows edited (hash kept) while its record of the commit files still matches them."""
    registry = build(store_url, commits=4)
    key = segment_key(2, 3)
    rows = decode_table(registry.storage.read(key), key).to_pylist()
    rows[0]["role"] = "grader-result"
    rewrite_segment(raw, registry, 2, 3, rows=rows)
    assert recorded(registry, 2, 3) == [digest(registry.storage.read(commit_key(v))) for v in (2, 3)]
    assert findings_of(store_url) == [("segment-mismatch", None, 2)]


def test_segment_rows_rehashed_under_a_kept_record_are_found(store_url: str, raw: Any) -> None:
    """Attack: the segment's first entry edited and its hash recomputed, so only its link to the next breaks."""
    registry = build(store_url, commits=4)
    key = segment_key(2, 3)
    rows = decode_table(registry.storage.read(key), key).to_pylist()
    rows[0]["role"] = "grader-result"
    rows[0]["entry_hash"] = entry_hash(rows[0])
    rewrite_segment(raw, registry, 2, 3, rows=rows)
    assert findings_of(store_url) == [("segment-mismatch", None, 2)]


def test_a_forged_record_does_not_hide_a_commit_readers_read(store_url: str, raw: Any) -> None:
    """Attack: a commit edited and the segment's record forged to match it, then an earlier segment removed so
    that readers (who take segments only in a chain from commit 0) read that commit itself."""
    registry = build(store_url, commits=4)
    rows = read_rows(registry, 2)
    rows[0]["size"] += 1
    write_rows(raw, registry, 2, rows)
    rewrite_segment(raw, registry, 2, 3, record=[digest(registry.storage.read(commit_key(v))) for v in (2, 3)])
    raw(registry).delete(segment_key(0, 1))
    assert ("entry-hash-mismatch", 2, None) in findings_of(store_url)


def test_a_record_that_is_not_one_is_read_as_no_record(store_url: str, raw: Any) -> None:
    """Attack: a segment's record replaced by bytes that name no commit; doctor decodes the commits instead."""
    registry = build(store_url, commits=4)
    rewrite_segment(raw, registry, 0, 1, record=["\xff not a digest"])
    rows = read_rows(registry, 1)
    rows[0]["size"] += 1
    write_rows(raw, registry, 1, rows)
    assert findings_of(store_url) == [("entry-hash-mismatch", 1, None), ("segment-mismatch", None, 0)]


def test_entries_moved_between_commits_inside_a_segment_are_found(store_url: str, raw: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (red team): in a segment, an entry moved from commit 0 into commit 1 (``commit`` is not hashed;
    the record of the commit files still matches them); readers would read the changed grouping."""
    monkeypatch.setattr(manifest_module, "SEGMENT_COMMITS", 3)
    monkeypatch.setattr(log_module, "PIECE_COMMITS", 3)
    registry = Registry.open(store_url)
    for i in range(3):
        data = f"evidence {i}".encode()
        registry.append([NewEntry(txn=f"t{i}{half}", role="transcript", experiment_id="exp",
                                  digest=registry.put(data), size=len(data)) for half in "ab"])
    key = segment_key(0, 2)
    rows = decode_table(registry.storage.read(key), key).to_pylist()
    rows[1]["commit"] = 1
    rewrite_segment(raw, registry, 0, 2, rows=rows)
    assert findings_of(store_url) == [("segment-mismatch", None, 0)]


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail the test, instead of hanging the suite, when what it runs blocks (an open of a FIFO does)."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_directory_or_fifo_named_as_a_segment_is_a_finding_not_a_traceback_or_a_hang(
        store_url: str, raw: Any) -> None:
    """Attack (red team): a directory, then a FIFO, put where segment 0..1 was; doctor raised a traceback on the
    first and blocked forever opening the second."""
    registry = build(store_url, commits=4)
    if not isinstance(registry.storage, LocalStorage):
        pytest.skip("an object store has no directories or FIFOs under a key")
    path = f"{registry.storage.url}/{segment_key(0, 1)}"
    raw(registry).delete(segment_key(0, 1))
    os.mkdir(path)
    assert findings_of(store_url) == [("segment-unreadable", None, 0)]
    os.rmdir(path)
    os.mkfifo(path)
    with within(60):
        assert findings_of(store_url) == [("segment-unreadable", None, 0)]
        with pytest.raises(ManifestCorrupt, match="cannot be read"):
            Registry.open(store_url).table()


def test_a_fifo_named_as_the_next_commit_stops_readers_and_doctor_with_a_finding(store_url: str) -> None:
    registry = build(store_url, commits=4)
    if not isinstance(registry.storage, LocalStorage):
        pytest.skip("an object store has no FIFOs under a key")
    os.mkfifo(f"{registry.storage.url}/{commit_key(4)}")
    with within(60):
        assert ("commit-unreadable", None, 4) in findings_of(store_url)
        with pytest.raises(ManifestCorrupt, match="commit 4"):
            Registry.open(store_url).table()


@pytest.mark.parametrize("name", [
    "segments/" + "\u0660" * 20 + "-" + "\u0660" * 19 + "\u0661.parquet",
    "log/00000000/" + "\u0660" * 20 + ".parquet",
    "log/" + "\u0660" * 8 + "/" + "0" * 20 + ".parquet",
], ids=["segment", "commit", "bucket"])
def test_a_name_in_other_digits_is_a_stray_file(store_url: str, raw: Any, name: str) -> None:
    """Attack (red team): a segment, commit or bucket named in Arabic-Indic digits (which ``int`` reads as a number)
    was taken for one readers then looked for under its ASCII name: never read, never named."""
    registry = build(store_url, commits=2)
    raw(registry).write(name, b"x")
    assert [kind for kind, _, _ in findings_of(store_url)] == ["stray-file"]
