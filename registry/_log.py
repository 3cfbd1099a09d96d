"""Doctor's reading of the raw log: every commit file decoded and checked, never the cached or compacted view.

Doctor must report a broken chain rather than refuse it, so it reads the
commits themselves, and all of them: a segment (derived, writable by anyone
who can write the store) replaces its commits for readers, so only a
comparison with every commit it stands for shows that it tells the truth --
and a commit edited under an intact segment is still history a reader
without that segment would read. Decoding a commit costs far more than
reading it, so the log is read in pieces of ``PIECE_COMMITS`` versions,
each decoded, hash-checked, link-checked and compared with the segments
inside it on its own (``registry._workers`` runs pieces on every core); the
seams between pieces are checked here, which gives the findings one pass
over one table would.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from registry._canonical import digest
from registry._chain import (
    Finding,
    check_commit_placement,
    check_entry_hashes,
    check_segment,
    inner_links,
    start_links,
)
from registry._entry import ENTRY_SCHEMA
from registry._errors import ManifestCorrupt
from registry._layout import LOG_DIR, commit_key, commit_version, list_segments, segment_chain, segment_key
from registry._manifest import COMMITS_KEY, READ_BATCH, SEGMENT_COMMITS, read_commits
from registry._parquet import ManifestOversized, decode_table, read_manifest_file
from registry._storage import Storage
from registry._workers import Workers

Range = tuple[int, int]
REPEATED = frozenset({"role", "experiment_id", "attempt_id", "grader_id", "grader_version", "time"})
PIECE_COMMITS = SEGMENT_COMMITS
"""Versions per piece: a segment a writer closes lies inside one piece, so the piece that decodes its commits
compares it too."""


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


@dataclass(frozen=True)
class Piece:
    """Consecutive commit files read and checked on their own, with the segments that lie inside them."""

    log: RawLog
    unreadable: list[Finding]
    steps: list[Finding]
    links: list[Finding]
    hashes: list[Finding]
    segments: list[tuple[Range, Finding | None]] = field(default_factory=list)


@dataclass(frozen=True)
class LogReport:
    """The raw log and its findings, in the order doctor reports them."""

    log: RawLog
    findings: list[Finding]
    """Unreadable commits, their placement, seq and prev links, entry hashes."""
    segments: int
    segment_findings: list[Finding]


def commit_versions(storage: Storage) -> list[int]:
    """Every version a commit file is stored for, in every bucket (a reader stops at the first empty one)."""
    versions = []
    for bucket in storage.list(LOG_DIR):
        found = (commit_version(bucket, name) for name in storage.list(f"{LOG_DIR}/{bucket}"))
        versions += [version for version in found if version is not None]
    return sorted(versions)


def read_piece(storage: Storage, work: tuple[list[int], list[Range], list[Range]]) -> Piece:
    """Read the commit files ``versions`` and check them: entry hashes, links within, the given segments.

    The commits of a segment readers take (``chained``) are read through it
    when it holds (``_through_segment``); the others are decoded one by one.
    """
    versions, ranges, chained = work
    through = {span[0]: (span, table) for span in chained
               if (table := _through_segment(storage, versions, span)) is not None}
    covered = {version for (first, last), _ in through.values() for version in range(first, last + 1)}
    decoded, unreadable = _decode_commits(storage, [version for version in versions if version not in covered])
    readable: list[int] = []
    offsets = [0]
    tables: list[pa.Table] = []
    for version in versions:
        if version in through:
            (first, last), table = through[version]
            commits = table.column("commit").to_pylist()
            readable += range(first, last + 1)
            base = offsets[-1]
            offsets += [base + bisect.bisect_right(commits, v) for v in range(first, last + 1)]
            tables.append(table)
        elif version in decoded:
            readable.append(version)
            offsets.append(offsets[-1] + decoded[version].num_rows)
            tables.append(decoded[version])
    merged = pa.concat_tables([ENTRY_SCHEMA.empty_table(), *tables]).combine_chunks().replace_schema_metadata(None)
    steps, links = inner_links(merged) if merged.num_rows else ([], [])
    log = RawLog(readable, offsets, merged)
    verified = [span for span, _ in through.values()]
    checked = [(span, None if span in verified else check_segment_file(storage, log, span)) for span in ranges]
    hashes = check_entry_hashes(pa.concat_tables([ENTRY_SCHEMA.empty_table(), *decoded.values()]).combine_chunks())
    return Piece(RawLog(readable, offsets, compact(merged)), unreadable, steps, links, hashes, checked)


def _refused(what: str, error: ManifestCorrupt) -> str:
    """The finding kind of a commit or segment that did not decode: over a reader's caps, or unreadable."""
    return f"{what}-oversized" if isinstance(error, ManifestOversized) else f"{what}-unreadable"


def _decode_commits(storage: Storage, versions: list[int]) -> tuple[dict[int, pa.Table], list[Finding]]:
    """The readable commit files of ``versions``, decoded, and a finding for each one that is not."""
    decoded: dict[int, pa.Table] = {}
    unreadable = []
    for start in range(0, len(versions), READ_BATCH):
        batch = versions[start : start + READ_BATCH]
        for version, data in zip(batch, storage.read_many([commit_key(v) for v in batch]), strict=True):
            try:
                decoded[version] = decode_table(data or b"", commit_key(version)).replace_schema_metadata(None)
            except ManifestCorrupt as error:
                unreadable.append(Finding(kind=_refused("commit", error), version=version, message=str(error)))
    return decoded, unreadable


def _through_segment(storage: Storage, versions: list[int], span: Range) -> pa.Table | None:
    """The entries of the commits of ``span`` read through their segment, or None when it does not hold.

    It holds when every one of those commit files is stored and has the
    digest the segment recorded for it when it was written, the last of them
    decodes to the segment's last entries, and the segment's own entries
    re-hash and link (the links end on that last commit, so the hash chain
    makes them the entries those commits were written with). Otherwise the
    commits are decoded, which gives every finding an edit there causes.
    A commit edited together with the record is left unread, as readers leave
    it while the segment stands; doctor decodes it once they would read it.
    """
    first, last = span
    if not set(range(first, last + 1)) <= set(versions):
        return None
    key = segment_key(first, last)
    try:
        segment = decode_table(read_manifest_file(storage, key), key)
    except (OSError, ManifestCorrupt):
        return None
    record = (segment.schema.metadata or {}).get(COMMITS_KEY, b"").decode("utf-8", "replace").split("\n")
    if len(record) != last - first + 1:
        return None
    ending = b""
    try:
        for (_, data), expected in zip(read_commits(storage, list(range(first, last + 1))), record, strict=True):
            if digest(data) != expected:
                return None
            ending = data
        last_commit = decode_table(ending, commit_key(last))
    except ManifestCorrupt:  # a commit file vanished, or the last one does not decode
        return None
    table = segment.replace_schema_metadata(None)
    if (check_segment(table, first, last, last_commit) or not _grouped_by_time(table)
            or inner_links(table) != ([], []) or check_entry_hashes(table)):
        return None
    return table


def _grouped_by_time(table: pa.Table) -> bool:
    """Whether the segment's entries change commit exactly where their write time changes.

    ``commit`` is not in the entry hash, so re-hashing cannot show entries
    moved between the commits inside a segment; ``time`` is, and each append
    stamps all of its entries with one time of its own. Two appends stamped
    alike (rare) only send the segment to be compared by decoding.
    """
    commits, times = table.column("commit").combine_chunks(), table.column("time").combine_chunks()
    if len(commits) < 2:
        return True
    moves = pc.not_equal(commits.slice(1), commits.slice(0, len(commits) - 1))
    ticks = pc.not_equal(times.slice(1), times.slice(0, len(times) - 1))
    return bool(pc.all(pc.equal(moves, ticks)).as_py())


def compact(table: pa.Table) -> pa.Table:
    """Entries as doctor keeps them in memory: names that repeat (an attempt's id on each of its entries, a
    commit's time, roles) dictionary-encoded -- a third less memory at a million entries. ``plain`` undoes it."""
    return pa.table([pc.dictionary_encode(table.column(name)) if name in REPEATED else table.column(name)
                     for name in table.column_names], names=table.column_names)


def plain(table: pa.Table) -> pa.Table:
    """Entries in the manifest's own schema (dictionary-encoded columns decoded)."""
    return pa.table([table.column(name).cast(ENTRY_SCHEMA.field(name).type) for name in ENTRY_SCHEMA.names],
                    schema=ENTRY_SCHEMA)


def check_segment_file(storage: Storage, log: RawLog, span: Range) -> Finding | None:
    """Whether the stored segment of ``span`` holds exactly the entries of every commit file in it."""
    first, last = span
    key = segment_key(first, last)
    files, expected = log.rows_of(first, last)
    expected = plain(expected)
    try:
        stored = decode_table(read_manifest_file(storage, key), key).replace_schema_metadata(None)
    except ManifestCorrupt as error:
        return Finding(kind=_refused("segment", error), version=first, message=str(error))
    except OSError as error:  # listed, then not a readable file (a directory, a dangling link, gone)
        return Finding(kind="segment-unreadable", version=first, message=f"{key} cannot be read ({error})")
    if files != last - first + 1 or not stored.equals(expected):
        return Finding(kind="segment-mismatch", version=first,
                       message=f"segment of commits {first}..{last} differs from those commits")
    return None


def read_log(storage: Storage, versions: list[int], workers: Workers) -> LogReport:
    """Read and check the commit files ``versions`` and every segment, piece by piece, on ``workers``."""
    spans = list_segments(storage)
    by_piece = {piece: list(group) for piece, group in itertools.groupby(versions, lambda v: v // PIECE_COMMITS)}
    inside: dict[int, list[Range]] = {}
    across: list[Range] = []
    for span in spans:
        piece = span[0] // PIECE_COMMITS
        (inside.setdefault(piece, []) if piece == span[1] // PIECE_COMMITS and piece in by_piece
         else across).append(span)
    chain = set(segment_chain(spans))
    pieces = workers.run_all(partial(read_piece, storage),
                             ((group, inside.get(piece, []), [span for span in inside.get(piece, []) if span in chain])
                              for piece, group in by_piece.items()))
    log = _joined(pieces)
    findings = [finding for piece in pieces for finding in piece.unreadable]
    findings += check_commit_placement(log.versions, [b - a for a, b in itertools.pairwise(log.offsets)],
                                       log.table.column("commit"))
    findings += _links([piece.log.table for piece in pieces], [(piece.steps, piece.links) for piece in pieces])
    findings += [finding for piece in pieces for finding in piece.hashes]
    checked = [checked for piece in pieces for checked in piece.segments]
    checked += [(span, check_segment_file(storage, log, span)) for span in across]  # ``plain``s what it compares
    segment_findings = [finding for _, finding in sorted(checked, key=lambda pair: pair[0]) if finding is not None]
    return LogReport(log, findings, len(spans), segment_findings)


def _joined(pieces: Iterable[Piece]) -> RawLog:
    versions: list[int] = []
    offsets = [0]
    tables = []
    for piece in pieces:
        versions += piece.log.versions
        offsets += [offsets[-1] + offset for offset in piece.log.offsets[1:]]
        tables.append(piece.log.table)
    return RawLog(versions, offsets, pa.concat_tables(tables) if tables else ENTRY_SCHEMA.empty_table())


def _links(tables: list[pa.Table], inner: list[tuple[list[Finding], list[Finding]]]) -> list[Finding]:
    """The link findings of the pieces joined: the first entry, each piece's own, and each seam between pieces."""
    filled = [(table, found) for table, found in zip(tables, inner, strict=True) if table.num_rows]
    if not filled:
        return []
    steps: list[Finding] = []
    links: list[Finding] = []
    for number, (table, (own_steps, own_links)) in enumerate(filled):
        if number:
            seam_steps, seam_links = inner_links(pa.concat_tables([filled[number - 1][0].slice(
                filled[number - 1][0].num_rows - 1), table.slice(0, 1)]))
            steps += seam_steps
            links += seam_links
        steps += own_steps
        links += own_links
    return start_links(filled[0][0], 0, None) + steps + links
