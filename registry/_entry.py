"""Manifest entries: the model, their Arrow schema, and their hash.

An entry's ``entry_hash`` is the digest of the canonical JSON of every other
field that has a value (``commit`` excluded: it says where an entry is stored,
not what it is). Dropping null fields keeps old hashes valid when a later
version adds an optional column.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from registry._canonical import digest_json

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
        pa.field("time", pa.string(), nullable=False),
        pa.field("commit", pa.int64(), nullable=False),
    ]
)
HASHED_FIELDS = tuple(name for name in ENTRY_SCHEMA.names if name not in ("entry_hash", "commit"))


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
    time: str
    commit: int


def utc_now() -> str:
    """Return the current UTC time as ISO-8601 with a ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def entry_hash(fields: dict[str, Any]) -> str:
    """Return the hash of an entry from its hashed, non-null fields."""
    return digest_json({name: fields[name] for name in HASHED_FIELDS if fields.get(name) is not None})


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
