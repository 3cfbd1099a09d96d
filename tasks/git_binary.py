"""Git binary hunks: what a patch carries as ``GIT binary patch``, decoded for scanning. Pure, no Prefect.

``git diff --binary`` writes a file containing a NUL byte as hunks of
base85 lines of zlib-compressed bytes (``literal N``: the whole file;
``delta N``: a git delta against the old file), one forward and one reverse
hunk per file. A text scan sees only base85 noise, yet ``git apply`` restores
every byte, so redaction must read what the hunks decode to.

A hunk that does not decode exactly as git would read it (bad length
character, bad base85, a stream that does not inflate to the declared size,
a delta that does not parse) is an error here: what cannot be read cannot be
shown to be clean.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

HUNK = re.compile(rb"^(literal|delta) (\d+)$")
MAX_INFLATED = 64 * 1024 * 1024
"""Refuse to inflate more than this per hunk: a few KiB of zlib can declare gigabytes."""
ARCHIVES = (
    (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"PK\x07\x08", "zip"), (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"), (b"7z\xbc\xaf\x27\x1c", "7z"), (b"\x28\xb5\x2f\xfd", "zstd"),
)


class BinaryHunkError(ValueError):
    """A binary hunk git would reject or read differently; its content is unknown."""


@dataclass(frozen=True)
class BinaryHunk:
    """One decoded hunk: ``content`` is the file (literal) or every byte the delta inserts, joined."""

    kind: str
    content: bytes


def _line_bytes(line: bytes) -> bytes:
    """One base85 line: a length character (A-Z = 1-26, a-z = 27-52), then ceil(n/4)*5 characters."""
    if not line:
        raise BinaryHunkError("empty data line")
    head = line[0]
    size = head - 64 if 65 <= head <= 90 else head - 70 if 97 <= head <= 122 else 0
    if not size or len(line) - 1 != (size + 3) // 4 * 5:
        raise BinaryHunkError("bad line length")
    try:
        return base64.b85decode(line[1:])[:size]
    except ValueError:
        raise BinaryHunkError("bad base85") from None


def _inflate(data: bytes, size: int) -> bytes:
    if size > MAX_INFLATED:
        raise BinaryHunkError(f"declares {size} bytes (more than {MAX_INFLATED} cannot be scanned)")
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(data, size + 1)
    except zlib.error:
        raise BinaryHunkError("does not inflate") from None
    if len(inflated) != size or not inflater.eof:
        raise BinaryHunkError("does not inflate to its declared size")
    return inflated


def _varint(data: bytes, position: int) -> int:
    """Skip one delta header size (7 bits per byte, high bit = more); return the next position."""
    while position < len(data) and data[position] & 0x80:
        position += 1
    if position >= len(data):
        raise BinaryHunkError("truncated delta header")
    return position + 1


def delta_inserts(delta: bytes) -> bytes:
    """Every byte a git delta inserts (copies come from the old file, which the patch does not carry)."""
    position = _varint(delta, _varint(delta, 0))
    inserted = bytearray()
    while position < len(delta):
        op = delta[position]
        position += 1
        if op & 0x80:
            position += bin(op & 0x7F).count("1")
        elif op:
            inserted += delta[position : position + op]
            position += op
        else:
            raise BinaryHunkError("delta opcode 0")
    if position != len(delta):
        raise BinaryHunkError("truncated delta")
    return bytes(inserted)


def binary_hunks(text: bytes) -> Iterator[BinaryHunk]:
    """Decode every hunk after each ``GIT binary patch`` line of ``text``."""
    lines = text.split(b"\n")
    index = 0
    while index < len(lines):
        if lines[index].rstrip(b"\r") != b"GIT binary patch":
            index += 1
            continue
        index += 1
        while index < len(lines) and (header := HUNK.match(lines[index].rstrip(b"\r"))):
            end = index + 1
            while end < len(lines) and lines[end].rstrip(b"\r"):
                end += 1
            data = b"".join(_line_bytes(line.rstrip(b"\r")) for line in lines[index + 1 : end])
            inflated = _inflate(data, int(header.group(2)))
            kind = header.group(1).decode()
            yield BinaryHunk(kind, inflated if kind == "literal" else delta_inserts(inflated))
            index = end + 1


def archive_format(content: bytes) -> str | None:
    """The compressed-archive format ``content`` starts with, if any: such bytes cannot be scanned."""
    if content[:3] == b"BZh" and content[3:4].isdigit():
        return "bz2"
    return next((name for magic, name in ARCHIVES if content.startswith(magic)), None)
