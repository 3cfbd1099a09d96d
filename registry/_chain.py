"""Pure checks of the manifest hash chain. No I/O, no Prefect.

The link and contiguity checks are vectorized with Arrow compute so a reader
can afford them on every load (1M entries in milliseconds); recomputing every
entry hash is a Python loop and belongs to ``tribunal doctor``.

A hash chain detects an edit but not a consistent rewrite of the whole tail
from the edit onward; only a head recorded elsewhere (a pin) catches that.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from registry._canonical import is_digest
from registry._entry import entry_hash_mismatches
from registry._errors import UsageError


class Finding(BaseModel):
    """One named problem found by a check; ``kind`` is stable for scripts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    message: str
    seq: int | None = None
    digest: str | None = None
    version: int | None = None

    @property
    def where(self) -> str:
        """Where to look, as a reader says it: a manifest seq, a commit, or an object digest."""
        if self.seq is not None:
            return f"seq {self.seq}"
        return f"commit {self.version}" if self.version is not None else self.digest or ""


class Pin(BaseModel):
    """A (seq, entry_hash) head recorded outside the store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    entry_hash: str

    @classmethod
    def parse(cls, text: str) -> Pin:
        """Read ``SEQ:HASH`` as doctor prints a head (``12:sha256:ab...``)."""
        seq, _, entry_hash = text.partition(":")
        if not seq.isdigit() or not is_digest(entry_hash):
            raise UsageError(f"pin {text!r}: expected SEQ:sha256:<64 hex>, as doctor prints the head")
        return cls(seq=int(seq), entry_hash=entry_hash)


def _positions(mask: pa.Array) -> list[int]:
    """Return the indices where a boolean array is true (nulls count as false)."""
    return [int(i) for i in pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()]


def check_links(table: pa.Table, start_seq: int = 0, start_prev: str | None = None) -> list[Finding]:
    """Check seq contiguity and prev links of entries that should start at ``start_seq``."""
    if table.num_rows == 0:
        return []
    steps, links = inner_links(table)
    return start_links(table, start_seq, start_prev) + steps + links


def start_links(table: pa.Table, start_seq: int, start_prev: str | None) -> list[Finding]:
    """Whether a non-empty table's first entry is seq ``start_seq`` and names ``start_prev`` before it."""
    first = table.column("seq")[0].as_py()
    findings = []
    if first != start_seq:
        findings.append(
            Finding(kind="seq-gap", seq=first, message=f"expected seq {start_seq} but found {first}")
        )
    if table.column("prev_hash")[0].as_py() != start_prev:
        findings.append(
            Finding(kind="prev-link-broken", seq=first,
                    message=f"seq {first}: prev_hash does not name the entry before it")
        )
    return findings


def inner_links(table: pa.Table) -> tuple[list[Finding], list[Finding]]:
    """Between each entry and the next: the seq step (findings first) and the prev link (findings second).

    A log read in pieces is checked piece by piece and at each seam (a table
    of the two entries either side), which gives the same findings as one table.
    """
    seq = table.column("seq").combine_chunks()
    prev = table.column("prev_hash").combine_chunks()
    own = table.column("entry_hash").combine_chunks()
    steps: list[Finding] = []
    for i in _positions(pc.not_equal(pc.subtract(seq.slice(1), seq.slice(0, max(0, len(seq) - 1))), 1)):
        before, after = seq[i].as_py(), seq[i + 1].as_py()
        if after == before:
            kind, message = "duplicate-entry", f"seq {after} appears more than once"
        elif after < before:
            kind, message = "entries-out-of-order", f"seq {after} comes after seq {before}"
        else:
            kind, message = "seq-gap", f"seqs {before + 1}..{after - 1} are missing"
        steps.append(Finding(kind=kind, seq=after, message=message))
    links = []
    for i in _positions(pc.invert(pc.fill_null(pc.equal(prev.slice(1), own.slice(0, max(0, len(own) - 1))), False))):
        at = seq[i + 1].as_py()
        links.append(
            Finding(kind="prev-link-broken", seq=at, message=f"seq {at}: prev_hash does not name the entry before it")
        )
    return steps, links


def check_entry_hashes(table: pa.Table) -> list[Finding]:
    """Recompute every entry hash; an edited entry no longer matches its own."""
    seqs = table.column("seq")
    return [
        Finding(kind="entry-hash-mismatch", seq=seq,
                message=f"seq {seq}: fields were changed after the entry was written")
        for seq in (seqs[i].as_py() for i in entry_hash_mismatches(table))
    ]


def check_commit_placement(versions: list[int], counts: list[int], commits: pa.ChunkedArray | pa.Array,
                           expected: int = 0) -> list[Finding]:
    """Check that commit files are numbered ``expected``, ``expected + 1``, ... and hold the commit they are named for.

    ``versions`` are the readable commit files in order, ``counts`` how many
    entries each holds and ``commits`` the ``commit`` column of those entries,
    file after file. Findings come in version order.
    """
    findings: list[tuple[int, Finding]] = []
    for version in versions:
        findings += [(missing, Finding(kind="commit-missing", version=missing,
                                       message=f"commit {missing} is missing from the log"))
                     for missing in range(expected, version)]
        expected = version + 1
    owners = pa.array([version for version, count in zip(versions, counts, strict=True) for _ in range(count)],
                      pa.int64())
    stored = pc.cast(commits, pa.int64())
    held: dict[int, set[int]] = {version: set() for version, count in zip(versions, counts, strict=True) if not count}
    for i in _positions(pc.not_equal(stored, owners)):
        held.setdefault(owners[i].as_py(), set())
    for version in held:
        held[version] = set(stored.filter(pc.equal(owners, version)).to_pylist())
    findings += [(version, Finding(kind="commit-misplaced", version=version,
                                   message=f"log file of commit {version} holds entries of commit(s) {sorted(found)}"))
                 for version, found in held.items()]
    return [finding for _, finding in sorted(findings, key=lambda pair: pair[0])]


def check_segment(table: pa.Table, first: int, last: int, last_commit: pa.Table) -> list[Finding]:
    """Check, without re-reading its commits, that a segment stands for commits ``first..last``.

    Its entries must name every commit of the range in order, and its entries
    of commit ``last`` must be that stored commit's, field for field. With the
    links ``check_links`` checks from the head before it, the segment then ends
    on the real chain; what it cannot show is an inner entry edited with its
    old hash kept, which doctor's full comparison (and entry re-hash) finds.
    """
    commits = table.column("commit").combine_chunks()
    tail = table.slice(max(0, table.num_rows - last_commit.num_rows))
    steps = pc.subtract(commits.slice(1), commits.slice(0, max(0, len(commits) - 1)))
    holds = (
        len(commits) > 0
        and commits[0].as_py() == first
        and commits[-1].as_py() == last
        and (len(steps) == 0 or (pc.min(steps).as_py() >= 0 and pc.max(steps).as_py() <= 1))
        and pc.sum(pc.equal(commits, last)).as_py() == last_commit.num_rows
        and tail.replace_schema_metadata(None).equals(last_commit.replace_schema_metadata(None))
    )
    if holds:
        return []
    return [Finding(kind="segment-mismatch", version=first,
                    message=f"segment of commits {first}..{last} differs from those commits")]


def check_pins(table: pa.Table, pins: Iterable[Pin]) -> list[Finding]:
    """Compare recorded heads with the chain: a consistent tail rewrite changes a pinned hash.

    Of a seq that appears more than once (a finding of its own), the last row counts.
    """
    findings = []
    for pin in pins:
        held = table.filter(pc.equal(table.column("seq"), pin.seq)).column("entry_hash")
        found = held[-1].as_py() if len(held) else None
        if found is None:
            findings.append(
                Finding(kind="pin-missing", seq=pin.seq, message=f"pinned seq {pin.seq} is no longer in the manifest")
            )
        elif found != pin.entry_hash:
            findings.append(
                Finding(
                    kind="pin-mismatch",
                    seq=pin.seq,
                    message=f"seq {pin.seq} hashes to {found}, not the pinned {pin.entry_hash}: history was rewritten",
                )
            )
    return findings
