"""The caps every decoder checks before it allocates (SPEC §17). No Prefect here.

A registry, a plan or a snapshot may come from someone else, and a few
hundred bytes can ask for gigabytes: a Parquet file whose dictionary holds
one long string that thousands of rows repeat, a sparse file under an
object's name, a tar of a million empty members. Each reader checks what a
file claims (a Parquet footer's rows and sizes, a file's length, an
archive's members) against these caps first, so a bomb is a finding, never
an allocation the registry chose.

The defaults hold every registry tribunal writes at the scale its
benchmarks measure (a segment of 1,000,000 entries decodes to about a
third of ``decoded_bytes``); an operator with a bigger one raises a cap
through the environment variable each message names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from registry._errors import UsageError

MIB = 1 << 20
ENV_NAMES = {
    "object_bytes": "TRIBUNAL_MAX_OBJECT_MB",
    "decoded_bytes": "TRIBUNAL_MAX_DECODED_MB",
    "archive_members": "TRIBUNAL_MAX_ARCHIVE_MEMBERS",
}
DECODED_RATIO = 64
"""A Parquet file may decode to at most this many times its size (tribunal's own files: under 20x)."""
DECODED_FLOOR = 8 * MIB
"""...or to this much, whatever its size (a small commit's fixed costs)."""
MIN_ROW_BYTES = 16
"""Each entry holds its own sha256 (32 bytes no encoder can shrink), so a file of N bytes holds under N/16 rows."""


@dataclass(frozen=True)
class Bounds:
    """How much one reader accepts from one file."""

    object_bytes: int = 1024 * MIB
    """The largest object, commit or segment read, and the most bytes a snapshot's files may hold."""
    decoded_bytes: int = 2048 * MIB
    """The most one Parquet file may decode to (and never more than DECODED_RATIO times its size)."""
    archive_members: int = 200_000
    """The most members a snapshot archive may hold."""

    def decoded_cap(self, file_bytes: int) -> int:
        """What a Parquet file of ``file_bytes`` may decode to."""
        return min(self.decoded_bytes, max(DECODED_RATIO * file_bytes, DECODED_FLOOR))

    @staticmethod
    def env_hint(field: str) -> str:
        return f"a cap on what a registry may ask a reader to hold; raise it with {ENV_NAMES[field]}"


@lru_cache(maxsize=1)
def reader_bounds() -> Bounds:
    """The caps of this process: the defaults, or what the environment sets (read once)."""
    values: dict[str, int] = {}
    for field, name in ENV_NAMES.items():
        text = os.environ.get(name)
        if text is None:
            continue
        if not text.isdigit() or int(text) < 1:
            raise UsageError(f"{name}={text!r}: give a positive whole number")
        values[field] = int(text) * (1 if field == "archive_members" else MIB)
    return Bounds(**values)
