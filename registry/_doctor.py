"""``tribunal doctor`` over the registry itself: chain, commits, segments, objects, signatures.

Doctor reads the raw commits, never the cached or compacted view, because it
must report a broken chain rather than refuse it (``_log``). Every problem
becomes a named ``Finding``. The checks of later layers (receipts,
judgements, re-derivation in ``tasks``) ride on the same pass over the
objects (``_sweep``), so each object is read once; the pieces of both passes
run on every core (``_workers``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from registry._bounds import Bounds, reader_bounds
from registry._canonical import DIGEST_PREFIX, digest, is_digest
from registry._chain import Finding, Pin, check_pins
from registry._layout import stray_files
from registry._log import RawLog, commit_versions, read_log
from registry._manifest import READ_BATCH, Head
from registry._memory import release_free_memory
from registry._objects import OBJECTS_DIR, object_key
from registry._registry import Registry
from registry._signatures import SigningStatus, SubjectKey, signing_trust, trust_roots, unvouched
from registry._sweep import Visit, attempt_batches, sweep_batch
from registry._workers import Workers

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


def _corrupt(registry: Registry, object_digest: str) -> Finding:
    """An object whose bytes do not match its address; ``object-oversized`` if it is over the read cap (a bomb
    no reader holds: it was never read)."""
    size = registry.storage.size(object_key(object_digest))
    cap = reader_bounds().object_bytes
    if size is not None and size > cap:
        return Finding(kind="object-oversized", digest=object_digest,
                       message=f"object {object_digest} holds {size} bytes, over the {cap}-byte read cap: not read "
                               f"({Bounds.env_hint('object_bytes')})")
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
    stored = pc.or_(pc.is_valid(table.column("payload")),  # a payload is checked where it is read
                    pc.is_in(table.column("digest"), value_set=listed))
    absent = table.select(["seq", "digest"]).filter(pc.invert(stored))
    return [_corrupt(registry, object_digest) for object_digest in sorted(corrupt)] + [
        _missing(seq, object_digest) for seq, object_digest in
        zip(absent.column("seq").to_pylist(), absent.column("digest").to_pylist(), strict=True)]


def check_named_objects(registry: Registry, table: pa.Table) -> list[Finding]:
    """Read back every object that ``table``'s entries name (a record carried in its commit is none), with
    doctor's findings for what fails.

    The whole-store scan is doctor's; a command that builds on one scope (a
    plan's attempts) reads back only the objects of that scope first.
    """
    objects = table.select(["seq", "digest", "payload"]).filter(pc.is_null(table.column("payload")))
    named = dict(zip(objects.column("digest").to_pylist(), objects.column("seq").to_pylist(), strict=True))
    digests = list(named)
    findings = []
    for start in range(0, len(digests), READ_BATCH):
        batch = digests[start : start + READ_BATCH]
        for object_digest, data in zip(batch, registry.storage.read_many([object_key(d) for d in batch]), strict=True):
            if data is None:
                findings.append(_missing(named[object_digest], object_digest))
            elif digest(data) != object_digest:
                findings.append(_corrupt(registry, object_digest))
    return findings


STRUCTURAL = frozenset({"commit-unreadable", "commit-oversized", "segment-oversized",
                        "commit-missing", "commit-misplaced", "seq-gap", "duplicate-entry",
                        "entries-out-of-order", "prev-link-broken", "segment-unreadable", "segment-mismatch"})
"""Findings after which the raw log may differ from what readers see (the verified segments and the commits)."""


@dataclass(frozen=True)
class Inspection(Generic[T]):
    """Doctor's report, and each visited attempt's result."""

    report: DoctorReport
    table: pa.Table
    """The raw log's entries (without ``prev_hash`` when its links hold: ``entries_where`` puts it back)."""
    visited: list[T] | None
    """What ``visit`` returned for each batch, or None when the raw log has a structural finding: readers may
    see other entries than it holds, so checks of what they read must read the manifest as readers do."""


def inspect_registry(registry: Registry, pins: Iterable[Pin] = (), trust: list[bytes] | None = None,
                     visit: Visit[T] | None = None, scope: frozenset[str] | None = None) -> Inspection[T]:
    """Verify everything the registry holds; ``visit`` each attempt (in ``scope``, if given) in the same pass.

    Signatures are verified against ``trust`` (public keys a stranger brought), else the registry's anchor.
    """
    versions = commit_versions(registry.storage)
    with Workers.for_log(len(versions)) as workers:
        read = read_log(registry.storage, versions, workers)
        release_free_memory()  # the commits decoded one by one leave the heap full of holes
        findings = read.findings + check_pins(read.log.table, pins) + stray_files(registry.storage)
        segments, segment_findings = read.segments, read.segment_findings
        sound = not any(finding.kind in STRUCTURAL for finding in findings + segment_findings)
        commits, head = len(read.log.versions), _head(read.log)
        table = read.log.table.drop_columns(["prev_hash"]) if sound else read.log.table
        del read  # links checked: each prev_hash is the entry hash before it, and is not kept (``_sweep`` rebuilds it)
        listed, object_findings = _listed_objects(registry)
        release_free_memory()
        trust_in = signing_trust(registry, table, trust_roots(trust or []))
        trusted = trust_in.trusted if trust_in.first_key is not None else None
        chosen = visit if visit is not None and sound else None
        swept = workers.run_all(partial(sweep_batch, registry, trusted=trusted, visit=chosen),
                                attempt_batches(table, scope))
    damaged: dict[str, bool] = {}
    vouched: set[SubjectKey] = set()
    for part in swept:
        damaged.update(part.damaged)
        vouched |= part.vouched
    object_findings += _check_objects(registry, table, listed, damaged)
    signing, missing = unvouched(table, trust_in, vouched)
    invalid = sorted((finding for part in swept for finding in part.signature_findings),
                     key=lambda finding: finding.seq or 0)
    report = DoctorReport(
        registry=registry.url,
        commits=commits,
        entries=table.num_rows,
        segments=segments,
        objects=len(listed),
        head=head,
        findings=findings + segment_findings + object_findings + trust_in.findings + invalid + missing,
        signing=signing,
    )
    visited = [part.visited for part in swept if part.visited is not None] if chosen is not None else None
    return Inspection(report, table, visited)


def _head(log: RawLog) -> Head | None:
    if not log.table.num_rows:
        return None
    return Head(version=log.versions[-1], seq=log.table.column("seq")[-1].as_py(),
                entry_hash=log.table.column("entry_hash")[-1].as_py())


def check_registry(registry: Registry, pins: Iterable[Pin] = (), trust: list[bytes] | None = None) -> DoctorReport:
    """Verify everything the registry holds; return every finding, never raise on damage."""
    return inspect_registry(registry, pins, trust).report
