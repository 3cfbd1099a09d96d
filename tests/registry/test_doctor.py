"""Corruption corpus (git's t1450-fsck): each planted damage gets its own named finding."""

from __future__ import annotations

from typing import Any

import pytest

import registry._log as log_module
import registry._manifest as manifest_module
from registry import NewEntry, Pin, Registry, check_registry
from registry._entry import entry_hash, rows_to_table
from registry._manifest import commit_key, segment_key
from registry._objects import object_key
from registry._parquet import decode_table, encode_table


def build(url: str, commits: int = 4) -> Registry:
    registry = Registry.open(url)
    for i in range(commits):
        data = f"evidence {i}".encode()
        registry.append([NewEntry(txn=f"t{i}", role="transcript", experiment_id="exp", digest=registry.put(data),
                                  size=len(data))])
    return registry


def read_rows(registry: Registry, version: int) -> list[dict[str, Any]]:
    key = commit_key(version)
    rows: list[dict[str, Any]] = decode_table(registry.storage.read(key), key).to_pylist()
    return rows


def write_rows(raw: Any, registry: Registry, version: int, rows: list[dict[str, Any]]) -> None:
    raw(registry).write(commit_key(version), encode_table(rows_to_table(rows)))


def kinds(registry: Registry, pins: list[Pin] | None = None) -> set[str]:
    return {finding.kind for finding in check_registry(Registry.open(registry.url), pins or []).findings}


def test_a_clean_registry_has_no_findings(store_url: str) -> None:
    report = check_registry(build(store_url))
    assert report.clean and report.entries == 4 and report.commits == 4 and report.objects == 4
    assert report.head is not None and report.head.seq == 3


def test_flipped_object_byte(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: evidence bytes edited in the store."""
    registry = build(store_url)
    target = registry.entries()[1].digest
    data = bytearray(registry.get(target))
    data[0] ^= 0x01
    raw(registry).write(object_key(target), bytes(data))
    findings = check_registry(Registry.open(store_url)).findings
    assert [(f.kind, f.digest) for f in findings] == [("object-corrupt", target)]


def test_deleted_object(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: evidence removed from the store while the manifest still names it."""
    registry = build(store_url)
    raw(registry).delete(object_key(registry.entries()[2].digest))
    assert kinds(registry) == {"object-missing"}


def test_deleted_commit(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: a commit removed from the log to hide what it recorded."""
    registry = build(store_url)
    raw(registry).delete(commit_key(1))
    findings = check_registry(Registry.open(store_url)).findings
    assert ("commit-missing", 1) in [(f.kind, f.version) for f in findings]


def test_reordered_commits(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: two commits swapped to change the order of history."""
    registry = build(store_url)
    one, two = registry.storage.read(commit_key(1)), registry.storage.read(commit_key(2))
    raw(registry).write(commit_key(1), two)
    raw(registry).write(commit_key(2), one)
    assert {"commit-misplaced", "entries-out-of-order"} <= kinds(registry)


def test_duplicated_entry(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: an entry replayed so a verdict counts twice."""
    registry = build(store_url)
    rows = read_rows(registry, 1)
    write_rows(raw, registry, 1, rows + rows)
    assert "duplicate-entry" in kinds(registry)


def test_edited_entry(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: an entry's fields changed in place (here: which object it names)."""
    registry = build(store_url)
    rows = read_rows(registry, 2)
    rows[0]["digest"] = registry.entries()[0].digest
    write_rows(raw, registry, 2, rows)
    findings = check_registry(Registry.open(store_url)).findings
    assert [(f.kind, f.seq) for f in findings] == [("entry-hash-mismatch", 2)]


def test_consistent_tail_rewrite_is_caught_only_by_a_pin(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: an entry edited and every later hash recomputed, so the chain is self-consistent."""
    registry = build(store_url)
    pinned = registry.head()
    assert pinned is not None
    prev = registry.entries()[1].entry_hash
    for version in (2, 3):
        rows = read_rows(registry, version)
        for row in rows:
            if version == 2:
                row["role"] = "grader-result"
            row["prev_hash"] = prev
            row["entry_hash"] = prev = entry_hash(row)
        write_rows(raw, registry, version, rows)
    assert kinds(registry) == set()
    pin = Pin(seq=pinned.seq, entry_hash=pinned.entry_hash)
    assert kinds(registry, [pin]) == {"pin-mismatch"}
    assert kinds(registry, [Pin(seq=99, entry_hash=pinned.entry_hash)]) == {"pin-missing"}


def test_tampered_segment(store_url: str, raw, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Attack: a compacted segment edited so readers see a different history than the log."""
    monkeypatch.setattr(manifest_module, "SEGMENT_COMMITS", 2)
    registry = build(store_url)
    key = segment_key(0, 1)
    rows = decode_table(registry.storage.read(key), key).to_pylist()
    rows[1]["role"] = "grader-result"
    raw(registry).write(key, encode_table(rows_to_table(rows)))
    findings = check_registry(Registry.open(store_url)).findings
    assert [(f.kind, f.version) for f in findings] == [("segment-mismatch", 0)]


def test_unreadable_commit(store_url: str, raw) -> None:  # type: ignore[no-untyped-def]
    """Attack: a commit file replaced by garbage."""
    registry = build(store_url)
    raw(registry).write(commit_key(3), b"not parquet")
    assert "commit-unreadable" in kinds(registry)


def test_unreadable_segment(store_url: str, raw, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Attack: a compacted segment replaced by garbage, so a reader would trip over it; doctor names it."""
    monkeypatch.setattr(manifest_module, "SEGMENT_COMMITS", 2)
    registry = build(store_url)
    raw(registry).write(segment_key(0, 1), b"not parquet")
    findings = check_registry(Registry.open(store_url)).findings
    assert [(f.kind, f.version) for f in findings] == [("segment-unreadable", 0)]


def _delete_commit(registry: Registry, raw: Any) -> None:
    raw(registry).delete(commit_key(4))


def _duplicate_across_a_seam(registry: Registry, raw: Any) -> None:
    write_rows(raw, registry, 4, read_rows(registry, 3))


def _swap_commits(registry: Registry, raw: Any) -> None:
    one, two = registry.storage.read(commit_key(3)), registry.storage.read(commit_key(4))
    raw(registry).write(commit_key(3), two)
    raw(registry).write(commit_key(4), one)


def _edit_entries(registry: Registry, raw: Any) -> None:
    for version in (1, 5):
        rows = read_rows(registry, version)
        rows[0]["size"] += 1
        write_rows(raw, registry, version, rows)


def _garble_commit(registry: Registry, raw: Any) -> None:
    raw(registry).write(commit_key(2), b"not parquet")


def _tamper_segment(registry: Registry, raw: Any) -> None:
    key = segment_key(2, 3)
    rows = decode_table(registry.storage.read(key), key).to_pylist()
    rows[0]["role"] = "grader-result"
    raw(registry).write(key, encode_table(rows_to_table(rows)))


@pytest.mark.parametrize("damage", [_delete_commit, _duplicate_across_a_seam, _swap_commits, _edit_entries,
                                    _garble_commit, _tamper_segment])
def test_the_log_read_in_pieces_gives_the_findings_of_one_read(  # type: ignore[no-untyped-def]
        store_url: str, raw, monkeypatch: pytest.MonkeyPatch, damage: Any) -> None:
    """Doctor decodes the log in pieces (on several cores); damage at a seam between pieces must read the same."""
    monkeypatch.setattr(manifest_module, "SEGMENT_COMMITS", 2)
    registry = build(store_url, commits=8)
    damage(registry, raw)
    whole = check_registry(Registry.open(store_url)).findings
    for size in (2, 3):
        monkeypatch.setattr(log_module, "PIECE_COMMITS", size)
        assert check_registry(Registry.open(store_url)).findings == whole, size
    assert whole
