"""``tribunal doctor`` over the registry itself: chain, commits, segments, objects.

Doctor reads the raw commits, never the cached or compacted view, because it
must report a broken chain rather than refuse it. Every problem becomes a
named ``Finding``; later layers (receipts, judgements) add their own checks
on top of this report.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from registry._canonical import DIGEST_PREFIX, digest, is_digest
from registry._chain import Finding, Pin, check_commit_placement, check_entry_hashes, check_links, check_pins
from registry._entry import ENTRY_SCHEMA
from registry._errors import ManifestCorrupt
from registry._layout import LOG_DIR, commit_key, commit_version, list_segments, segment_key, stray_files
from registry._manifest import READ_BATCH, Head, decode_table
from registry._objects import OBJECTS_DIR, object_key
from registry._registry import Registry
from registry._signatures import SigningStatus, check_signatures, trust_roots


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


def _read_commits(registry: Registry, findings: list[Finding]) -> list[tuple[int, pa.Table]]:
    commits = []
    versions = _all_commit_versions(registry)
    for start in range(0, len(versions), READ_BATCH):
        batch = versions[start : start + READ_BATCH]
        for version, data in zip(batch, registry.storage.read_many([commit_key(v) for v in batch]), strict=True):
            try:
                table = decode_table(data or b"", commit_key(version))
            except ManifestCorrupt as error:
                findings.append(Finding(kind="commit-unreadable", version=version, message=str(error)))
                continue
            commits.append((version, table.replace_schema_metadata(None)))
    return commits


def _check_segments(registry: Registry, commits: list[tuple[int, pa.Table]]) -> tuple[int, list[Finding]]:
    findings = []
    ranges = list_segments(registry.storage)
    for first, last in ranges:
        key = segment_key(first, last)
        parts = [table for version, table in commits if first <= version <= last]
        expected = pa.concat_tables(parts) if parts else ENTRY_SCHEMA.empty_table()
        try:
            stored = decode_table(registry.storage.read(key), key).replace_schema_metadata(None)
        except ManifestCorrupt as error:
            findings.append(Finding(kind="segment-unreadable", version=first, message=str(error)))
            continue
        if len(parts) != last - first + 1 or not stored.equals(expected):
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


def _check_objects(registry: Registry, table: pa.Table) -> tuple[int, list[Finding]]:
    listed = list(registry.objects.digests())
    stored = [name for name in listed if is_digest(name)]
    findings = [Finding(kind="stray-file", message=f"{OBJECTS_DIR}/*/{name.removeprefix(DIGEST_PREFIX)} is not an "
                        "object's address; readers ignore it, remove it")
                for name in listed if not is_digest(name)]
    for start in range(0, len(stored), READ_BATCH):
        batch = stored[start : start + READ_BATCH]
        for object_digest, data in zip(batch, registry.storage.read_many([object_key(d) for d in batch]), strict=True):
            if data is None or digest(data) != object_digest:
                findings.append(_corrupt(object_digest))
    present = set(stored)
    for seq, object_digest in zip(table.column("seq").to_pylist(), table.column("digest").to_pylist(), strict=True):
        if object_digest not in present:
            findings.append(_missing(seq, object_digest))
    return len(stored), findings


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


def check_registry(registry: Registry, pins: Iterable[Pin] = (), trust: list[bytes] | None = None) -> DoctorReport:
    """Verify everything the registry holds; return every finding, never raise on damage.

    Signatures are verified against ``trust`` (public keys a stranger brought), else the registry's anchor.
    """
    findings: list[Finding] = []
    commits = _read_commits(registry, findings)
    findings += check_commit_placement(commits)
    table = pa.concat_tables([table for _, table in commits]) if commits else ENTRY_SCHEMA.empty_table()
    findings += check_links(table)
    findings += check_entry_hashes(table)
    findings += check_pins(table, pins)
    findings += stray_files(registry.storage)
    segments, segment_findings = _check_segments(registry, commits)
    objects, object_findings = _check_objects(registry, table)
    signing, signature_findings = check_signatures(registry, table, trust_roots(trust or []))
    head = None
    if table.num_rows:
        head = Head(
            version=commits[-1][0],
            seq=table.column("seq")[-1].as_py(),
            entry_hash=table.column("entry_hash")[-1].as_py(),
        )
    return DoctorReport(
        registry=registry.url,
        commits=len(commits),
        entries=table.num_rows,
        segments=segments,
        objects=objects,
        head=head,
        findings=findings + segment_findings + object_findings + signature_findings,
        signing=signing,
    )
