"""``tribunal doctor`` over the registry itself: chain, commits, segments, objects.

Doctor reads the raw commits, never the cached or compacted view, because it
must report a broken chain rather than refuse it. Every problem becomes a
named ``Finding``; later layers (receipts, judgements) add their own checks
on top of this report.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from registry._canonical import DIGEST_PREFIX, digest, is_digest
from registry._chain import Finding, Pin, check_commit_placement, check_entry_hashes, check_links, check_pins
from registry._entry import ENTRY_SCHEMA
from registry._errors import ManifestCorrupt
from registry._layout import LOG_DIR, commit_key, commit_version, list_segments, segment_key, stray_files
from registry._manifest import READ_BATCH, Head, decode_table
from registry._objects import OBJECTS_DIR, object_key
from registry._registry import Registry
from registry._signatures import SigningStatus, SubjectKey, signing_trust, trust_roots, unvouched
from registry._sweep import Visit, attempt_batches, sweep_batch

MERGE_COMMITS = 4096
T = TypeVar("T")


class DoctorReport(BaseModel):
    """What doctor checked and what it found; clean means no findings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    registry: str
    commits: int
    entries: int
    segments: int
    objects: int
    head: Head | None
    findings: list[Finding]
    signing: SigningStatus | None = None

    @property
    def clean(self) -> bool:
        return not self.findings


def _all_commit_versions(registry: Registry) -> list[int]:
    versions = []
    for bucket in registry.storage.list(LOG_DIR):
        found = (commit_version(bucket, name) for name in registry.storage.list(f"{LOG_DIR}/{bucket}"))
        versions += [version for version in found if version is not None]
    return sorted(versions)


@dataclass(frozen=True)
class RawLog:
    """Every readable commit file, decoded: the entries in file order and where each file's rows start."""

    versions: list[int]
    offsets: list[int]
    """``offsets[i]`` is the first row of ``versions[i]``; the last offset is the row count."""
    table: pa.Table

    def rows_of(self, first: int, last: int) -> tuple[int, pa.Table]:
        """How many commit files of ``first..last`` were read, and their entries."""
        lo, hi = bisect.bisect_left(self.versions, first), bisect.bisect_right(self.versions, last)
        return hi - lo, self.table.slice(self.offsets[lo], self.offsets[hi] - self.offsets[lo])


def _read_log(registry: Registry, findings: list[Finding]) -> RawLog:
    """Decode every commit file, in batches (one storage round trip each), checking where each one belongs.

    Tiny per-commit tables are merged every ``MERGE_COMMITS`` commits: a
    table per commit costs more memory than its rows at a hundred thousand commits.
    """
    versions = _all_commit_versions(registry)
    readable: list[int] = []
    offsets = [0]
    merged: list[pa.Table] = []
    pending: list[pa.Table] = []
    for start in range(0, len(versions), READ_BATCH):
        batch = versions[start : start + READ_BATCH]
        for version, data in zip(batch, registry.storage.read_many([commit_key(v) for v in batch]), strict=True):
            try:
                table = decode_table(data or b"", commit_key(version))
            except ManifestCorrupt as error:
                findings.append(Finding(kind="commit-unreadable", version=version, message=str(error)))
                continue
            readable.append(version)
            offsets.append(offsets[-1] + table.num_rows)
            pending.append(table.replace_schema_metadata(None))
        if len(pending) >= MERGE_COMMITS or start + READ_BATCH >= len(versions):
            merged.append(pa.concat_tables(pending or [ENTRY_SCHEMA.empty_table()]).combine_chunks())
            pending = []
    table = pa.concat_tables(merged) if merged else ENTRY_SCHEMA.empty_table()
    counts = [end - begin for begin, end in itertools.pairwise(offsets)]
    findings += check_commit_placement(readable, counts, table.column("commit"))
    return RawLog(readable, offsets, table)


def _check_segments(registry: Registry, log: RawLog) -> tuple[int, list[Finding]]:
    findings = []
    ranges = list_segments(registry.storage)
    for first, last in ranges:
        key = segment_key(first, last)
        files, expected = log.rows_of(first, last)
        try:
            stored = decode_table(registry.storage.read(key), key).replace_schema_metadata(None)
        except ManifestCorrupt as error:
            findings.append(Finding(kind="segment-unreadable", version=first, message=str(error)))
            continue
        if files != last - first + 1 or not stored.equals(expected):
            findings.append(
                Finding(kind="segment-mismatch", version=first,
                        message=f"segment of commits {first}..{last} differs from those commits")
            )
    return len(ranges), findings


def _corrupt(object_digest: str) -> Finding:
    return Finding(kind="object-corrupt", digest=object_digest,
                   message=f"object {object_digest}: bytes do not match the address")


def _missing(seq: int, object_digest: str) -> Finding:
    return Finding(kind="object-missing", seq=seq, digest=object_digest,
                   message=f"seq {seq} names object {object_digest}, which is not stored")


def _listed_objects(registry: Registry) -> tuple[pa.Array, list[Finding]]:
    """Every stored object's digest, and a finding for each file under ``objects/`` that is no object's address."""
    stored: list[pa.Array] = []
    findings = []
    for fan_out in registry.storage.list(OBJECTS_DIR):
        names = [DIGEST_PREFIX + name for name in registry.storage.list(f"{OBJECTS_DIR}/{fan_out}")]
        stored.append(pa.array([name for name in names if is_digest(name)], pa.string()))
        findings += [Finding(kind="stray-file", message=f"{OBJECTS_DIR}/*/{name.removeprefix(DIGEST_PREFIX)} is "
                             "not an object's address; readers ignore it, remove it")
                     for name in names if not is_digest(name)]
    return pa.concat_arrays(stored) if stored else pa.array([], pa.string()), findings


def _check_objects(registry: Registry, table: pa.Table, listed: pa.Array, damaged: dict[str, bool]) -> list[Finding]:
    """Objects whose bytes do not match their address (in address order), and entries naming no stored object.

    The sweep read every object an entry names (``damaged``: what failed);
    the stored objects no entry names are read here.
    """
    unnamed = listed.filter(pc.invert(pc.is_in(listed, value_set=pc.unique(table.column("digest"))))).to_pylist()
    corrupt = {object_digest for object_digest, differs in damaged.items() if differs}
    vanished = pa.array([object_digest for object_digest, differs in damaged.items() if not differs], pa.string())
    corrupt.update(vanished.filter(pc.is_in(vanished, value_set=listed)).to_pylist())  # listed, then gone
    for start in range(0, len(unnamed), READ_BATCH):
        batch = unnamed[start : start + READ_BATCH]
        for object_digest, data in zip(batch, registry.storage.read_many([object_key(d) for d in batch]), strict=True):
            if data is None or digest(data) != object_digest:
                corrupt.add(object_digest)
    absent = table.filter(pc.invert(pc.is_in(table.column("digest"), value_set=listed)))
    return [_corrupt(object_digest) for object_digest in sorted(corrupt)] + [
        _missing(seq, object_digest) for seq, object_digest in
        zip(absent.column("seq").to_pylist(), absent.column("digest").to_pylist(), strict=True)]


def check_named_objects(registry: Registry, table: pa.Table) -> list[Finding]:
    """Read back every object that ``table``'s entries name, with doctor's findings for what fails.

    The whole-store scan is doctor's; a command that builds on one scope (a
    plan's attempts) reads back only the objects of that scope first.
    """
    named = dict(zip(table.column("digest").to_pylist(), table.column("seq").to_pylist(), strict=True))
    digests = list(named)
    findings = []
    for start in range(0, len(digests), READ_BATCH):
        batch = digests[start : start + READ_BATCH]
        for object_digest, data in zip(batch, registry.storage.read_many([object_key(d) for d in batch]), strict=True):
            if data is None:
                findings.append(_missing(named[object_digest], object_digest))
            elif digest(data) != object_digest:
                findings.append(_corrupt(object_digest))
    return findings


STRUCTURAL = frozenset({"commit-unreadable", "commit-missing", "commit-misplaced", "seq-gap", "duplicate-entry",
                        "entries-out-of-order", "prev-link-broken", "segment-unreadable", "segment-mismatch"})
"""Findings after which the raw log may differ from what readers see (the verified segments and the commits)."""


@dataclass(frozen=True)
class Inspection(Generic[T]):
    """Doctor's report, and each visited attempt's result."""

    report: DoctorReport
    table: pa.Table
    """The raw log's entries."""
    visited: list[T] | None
    """None when the raw log has a structural finding: readers may see other entries than it holds, so
    checks of what they read must read the manifest as readers do."""


def inspect_registry(registry: Registry, pins: Iterable[Pin] = (), trust: list[bytes] | None = None,
                     visit: Visit[T] | None = None, scope: frozenset[str] | None = None) -> Inspection[T]:
    """Verify everything the registry holds; ``visit`` each attempt (in ``scope``, if given) in the same pass.

    Signatures are verified against ``trust`` (public keys a stranger brought), else the registry's anchor.
    """
    findings: list[Finding] = []
    log = _read_log(registry, findings)
    table = log.table
    findings += check_links(table)
    findings += check_entry_hashes(table)
    findings += check_pins(table, pins)
    findings += stray_files(registry.storage)
    segments, segment_findings = _check_segments(registry, log)
    sound = not any(finding.kind in STRUCTURAL for finding in findings + segment_findings)
    listed, object_findings = _listed_objects(registry)
    trust_in = signing_trust(registry, table, trust_roots(trust or []))
    trusted = trust_in.trusted if trust_in.first_key is not None else None
    damaged: dict[str, bool] = {}
    vouched: set[SubjectKey] = set()
    invalid: list[Finding] = []
    visited: list[T] | None = [] if visit is not None and sound else None
    for batch in attempt_batches(table):
        swept = sweep_batch(registry, batch, trusted, visit if visited is not None else None, scope)
        damaged.update(swept.damaged)
        vouched |= swept.vouched
        invalid += swept.signature_findings
        if visited is not None:
            visited += swept.visited
    object_findings += _check_objects(registry, table, listed, damaged)
    signing, missing = unvouched(table, trust_in, vouched)
    signature_findings = trust_in.findings + sorted(invalid, key=lambda finding: finding.seq or 0) + missing
    head = None
    if table.num_rows:
        head = Head(
            version=log.versions[-1],
            seq=table.column("seq")[-1].as_py(),
            entry_hash=table.column("entry_hash")[-1].as_py(),
        )
    report = DoctorReport(
        registry=registry.url,
        commits=len(log.versions),
        entries=table.num_rows,
        segments=segments,
        objects=len(listed),
        head=head,
        findings=findings + segment_findings + object_findings + signature_findings,
        signing=signing,
    )
    return Inspection(report, table, visited)


def check_registry(registry: Registry, pins: Iterable[Pin] = (), trust: list[bytes] | None = None) -> DoctorReport:
    """Verify everything the registry holds; return every finding, never raise on damage."""
    return inspect_registry(registry, pins, trust).report
