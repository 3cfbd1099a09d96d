"""Manifest entries: the model, their Arrow schema, and their hash.

An entry's ``entry_hash`` is the digest of the canonical JSON of every other
field that has a value (``commit`` excluded: it says where an entry is stored,
not what it is). Dropping null fields keeps old hashes valid when a later
version adds an optional column, as ``payload`` was: a small record (a
signature) carried in the commit itself, base64, whose sha256 is the entry's
``digest``. It saves the separate object and its fsync on every signed append,
and its bytes are covered by the entry hash like every other field.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from registry._canonical import digest, digest_json

ENTRY_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("prev_hash", pa.string()),
        pa.field("entry_hash", pa.string(), nullable=False),
        pa.field("txn", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("experiment_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string()),
        pa.field("digest", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("generation", pa.int64()),
        pa.field("grader_id", pa.string()),
        pa.field("grader_version", pa.string()),
        pa.field("payload", pa.string()),
        pa.field("time", pa.string(), nullable=False),
        pa.field("commit", pa.int64(), nullable=False),
    ]
)
LEGACY_SCHEMA = pa.schema([field for field in ENTRY_SCHEMA if field.name != "payload"])
"""Commits and segments written before ``payload`` existed."""
HASHED_FIELDS = tuple(name for name in ENTRY_SCHEMA.names if name not in ("entry_hash", "commit"))
JSON_ESCAPED = r'["\\\x00-\x1f]'
"""What ``json.dumps`` escapes in a string (``ensure_ascii=False``): quote, backslash, control characters."""
HASH_CHUNK = 1 << 16


class NewEntry(BaseModel):
    """What a caller asks to append; the manifest adds seq, links, hash and time.

    ``txn`` names the effect (e.g. ``evaluate:<attempt>:transcript``): appending
    a txn that the manifest already holds returns the stored entry instead of
    appending again, so a retried task cannot record the same thing twice.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    txn: str = Field(min_length=1)
    role: str = Field(min_length=1)
    experiment_id: str = Field(min_length=1)
    digest: str
    size: int = Field(ge=0)
    attempt_id: str | None = None
    generation: int | None = None
    grader_id: str | None = None
    grader_version: str | None = None
    payload: str | None = None
    """The record itself, base64, when it is carried in the commit instead of stored as an object."""


class ManifestEntry(BaseModel):
    """One stored manifest entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    prev_hash: str | None
    entry_hash: str
    txn: str
    role: str
    experiment_id: str
    attempt_id: str | None = None
    digest: str
    size: int
    generation: int | None = None
    grader_id: str | None = None
    grader_version: str | None = None
    payload: str | None = None
    time: str
    commit: int


def carry(data: bytes) -> tuple[str, str]:
    """(digest, payload) of a record an entry carries in its commit."""
    return digest(data), base64.b64encode(data).decode()


def carried(payload: str, object_digest: str) -> bytes | None:
    """The bytes a ``payload`` carries, or None when they are not base64 or do not hash to the entry's digest."""
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if digest(data) == object_digest else None


def with_payload(table: pa.Table) -> pa.Table:
    """A table read from a file in ``LEGACY_SCHEMA``, in ``ENTRY_SCHEMA`` (no entry of it carries a payload)."""
    return table.add_column(ENTRY_SCHEMA.get_field_index("payload"), ENTRY_SCHEMA.field("payload"),
                            pa.nulls(table.num_rows, pa.string()))


def utc_now() -> str:
    """Return the current UTC time as ISO-8601 with a ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def entry_hash(fields: dict[str, Any]) -> str:
    """Return the hash of an entry from its hashed, non-null fields."""
    return digest_json({name: fields[name] for name in HASHED_FIELDS if fields.get(name) is not None})


def entry_hash_mismatches(table: pa.Table) -> list[int]:
    """The rows whose ``entry_hash`` is not ``entry_hash`` of their fields, in row order.

    Doctor re-hashes every entry (a million at the manifest's design size).
    Each row's canonical JSON is built column by column in Arrow -- keys in
    sorted order, null fields left out, integers in decimal, strings quoted --
    which is ``canonical_json``'s text for every row whose strings need no
    JSON escape; a row with one (a quote, backslash or control character) is
    hashed by ``entry_hash`` itself. Text that is not UTF-8 never gets here:
    ``decode_table`` refuses the file that holds it.
    """
    found = []
    for start in range(0, table.num_rows, HASH_CHUNK):
        chunk = table.slice(start, HASH_CHUNK)
        texts, escaped = _canonical_rows(chunk)
        stored = chunk.column("entry_hash").to_pylist()
        for i, (text, kept) in enumerate(zip(texts.to_pylist(), stored, strict=True)):
            if escaped[i]:
                if entry_hash(chunk.slice(i, 1).to_pylist()[0]) != kept:
                    found.append(start + i)
            elif "sha256:" + hashlib.sha256(text).hexdigest() != kept:
                found.append(start + i)
    return found


def _canonical_rows(table: pa.Table) -> tuple[pa.Array, list[bool]]:
    """Each row's canonical JSON bytes (exact where no string needs escaping), and which rows need it."""
    pieces = []
    escaped = None
    for name in sorted(HASHED_FIELDS):
        column = table.column(name)
        if pa.types.is_integer(column.type):
            value = pc.cast(column, pa.string())
        else:
            value = pc.binary_join_element_wise('"', column, '"', "")
            needs = pc.fill_null(pc.match_substring_regex(column, JSON_ESCAPED), False)
            escaped = needs if escaped is None else pc.or_(escaped, needs)
        pieces.append(pc.binary_join_element_wise(f'"{name}":', value, ""))
    body = pc.binary_join_element_wise(*pieces, ",", null_handling="skip")
    text = pc.binary_join_element_wise("{", body, "}", "")
    flags = escaped.to_pylist() if escaped is not None else [False] * table.num_rows
    return pc.cast(text, pa.binary()), flags


def seal_entries(
    drafts: list[NewEntry], *, first_seq: int, prev_hash: str | None, time: str, commit: int
) -> list[dict[str, Any]]:
    """Chain drafts after ``(first_seq - 1, prev_hash)`` and return full entry rows."""
    rows = []
    for offset, draft in enumerate(drafts):
        row: dict[str, Any] = {
            **draft.model_dump(),
            "seq": first_seq + offset,
            "prev_hash": prev_hash,
            "time": time,
            "commit": commit,
        }
        row["entry_hash"] = entry_hash(row)
        prev_hash = row["entry_hash"]
        rows.append(row)
    return rows


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Build an Arrow table of entry rows in the manifest schema."""
    return pa.Table.from_pylist(rows, schema=ENTRY_SCHEMA)
