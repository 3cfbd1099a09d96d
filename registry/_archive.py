"""Deterministic archives of case repositories.

The snapshot digest must depend on the tree alone, so the same tree gives the
same bytes whatever the mtimes, owners or directory listing order: a plain
(uncompressed) tar with entries sorted by path, mtime 0, uid/gid 0, no owner
names, and modes normalized to 0644/0755 (directories 0755). ``.git`` is
excluded at any depth. Symlinks are stored as links, with their target text
as written, and never followed, so a link cannot pull files from outside the
repository into the store. Anything else (sockets, devices, FIFOs) is refused.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

from registry._errors import SpecError

EXCLUDED_NAMES = frozenset({".git"})


def _walk(root: Path, excluded: frozenset[str]) -> list[Path]:
    """Return every path under ``root`` (not following links), sorted, without the ``excluded`` names."""
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(name for name in dirnames if name not in excluded)
        base = Path(directory)
        found.extend(base / name for name in dirnames)
        found.extend(base / name for name in filenames if name not in excluded)
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _entry(root: Path, path: Path) -> tuple[tarfile.TarInfo, bytes | None]:
    name = path.relative_to(root).as_posix()
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
        return info, None
    if stat.S_ISDIR(mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        return info, None
    if stat.S_ISREG(mode):
        data = path.read_bytes()
        info.size = len(data)
        info.mode = 0o755 if mode & stat.S_IXUSR else 0o644
        return info, data
    raise SpecError(f"{path}: not a regular file, directory or symlink; cannot archive it")


def archive_tree(root: Path, excluded: frozenset[str] = EXCLUDED_NAMES) -> bytes:
    """Return the deterministic tar bytes of the directory ``root`` (names in ``excluded`` left out at any depth)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for path in _walk(root, excluded):
            info, data = _entry(root, path)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()
