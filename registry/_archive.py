"""Deterministic archives of case repositories, and unpacking one that may come from someone else.

The snapshot digest must depend on the tree alone, so the same tree gives the
same bytes whatever the mtimes, owners or directory listing order: a plain
(uncompressed) tar with entries sorted by path, mtime 0, uid/gid 0, no owner
names, and modes normalized to 0644/0755 (directories 0755). ``.git`` is
excluded at any depth. Symlinks are stored as links, with their target text
as written, and never followed, so a link cannot pull files from outside the
repository into the store. Anything else (sockets, devices, FIFOs) is refused.

A snapshot read from a registry is input from whoever wrote that registry
(SPEC §17): ``unpack_archive`` checks every member before it writes one.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections import deque
from pathlib import Path

from registry._bounds import Bounds
from registry._errors import RegistryError, SpecError

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


class UnsafeArchive(RegistryError):
    """A snapshot holds a member tribunal will not write (a link out, a device, a duplicate, a bomb)."""


PLAIN_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
PATH_MAX = 4096
"""The longest member name or link target unpacked (Linux's own limit for one path)."""
LINK_WORK = 4_000_000
"""Path components followed while resolving every symlink of one archive (tribunal's snapshots: a few)."""
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
LINK_HOPS = 40
"""Symlinks followed while resolving one path, as the kernel's own limit (ELOOP)."""


def unpack_archive(data: bytes, destination: Path, bounds: Bounds) -> None:
    """Write a snapshot's files into ``destination``, a fresh empty directory, after checking every member.

    Only regular files, directories and symlinks that resolve inside the
    tree are written; a hard link, a device, a FIFO, a sparse or setuid
    member, a name that leaves the tree, passes through a symlink, comes
    twice or holds a ``.git`` (tribunal's snapshots never do: a planted git
    config or ``gitdir`` file would steer the git tribunal runs on the
    tree), and an archive over ``bounds`` are refused (UnsafeArchive naming
    the member) before anything is written, so no member can be written
    through another. Symlinks are made last. The caller checks the digest of
    ``data`` first (``Registry.get`` does).
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            members = _checked(archive, bounds)
            for member, parts in members:
                target = destination.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)  # no parent is a symlink (checked)
                if member.isdir():
                    target.mkdir(mode=0o755, exist_ok=True)
                elif member.type in PLAIN_TYPES:
                    source = archive.extractfile(member)
                    assert source is not None  # a regular member always has a body
                    with open(target, "xb") as sink:
                        sink.write(source.read())
                    target.chmod(0o755 if member.mode & stat.S_IXUSR else 0o644)
            for member, parts in members:
                if member.issym():
                    os.symlink(member.linkname, destination.joinpath(*parts))
    except (tarfile.TarError, EOFError) as error:
        raise UnsafeArchive(f"the snapshot is not a readable tar archive ({error})") from None
    except OSError as error:  # e.g. a file member below another file member
        raise UnsafeArchive(f"the snapshot cannot be unpacked: {error.strerror} ({error.filename})") from None


def _checked(archive: tarfile.TarFile, bounds: Bounds) -> list[tuple[tarfile.TarInfo, list[str]]]:
    """Every member with its path's components, parents first; UnsafeArchive at the first one refused."""
    members: list[tuple[tarfile.TarInfo, list[str]]] = []
    names: set[str] = set()
    links = _Links()
    total = 0
    for member in archive:
        if len(members) >= bounds.archive_members:
            raise UnsafeArchive(f"the snapshot holds over {bounds.archive_members} members "
                                f"({bounds.env_hint('archive_members')})")
        parts = _parts(member.name)
        name = "/".join(parts)
        if not (member.isdir() or member.issym() or member.type in PLAIN_TYPES) or member.sparse is not None:
            raise UnsafeArchive(f"snapshot member {member.name!r} is {_kind(member)}: only regular files, "
                                "directories and symlinks are unpacked")
        if member.mode & SPECIAL_BITS:
            raise UnsafeArchive(f"snapshot member {member.name!r} has a setuid, setgid or sticky bit")
        if name in names:
            raise UnsafeArchive(f"snapshot member {member.name!r} comes twice")
        if ".git" in parts:
            raise UnsafeArchive(f"snapshot member {member.name!r} is git metadata, which snapshots never hold")
        if len(member.linkname) > PATH_MAX:
            raise UnsafeArchive(f"snapshot member {member.name!r} links to a path over {PATH_MAX} bytes")
        total += member.size
        if total > bounds.object_bytes:
            raise UnsafeArchive(f"the snapshot's files hold over {bounds.object_bytes} bytes "
                                f"({bounds.env_hint('object_bytes')})")
        names.add(name)
        members.append((member, parts))
        if member.issym():
            links.add(parts, member.linkname)
    for member, parts in members:
        if links.crossed(parts[:-1]):
            raise UnsafeArchive(f"snapshot member {member.name!r} lies below a symlink")
        if member.issym() and not links.stays_inside(parts):
            raise UnsafeArchive(f"snapshot member {member.name!r} is a symlink to {member.linkname!r}, "
                                "outside the snapshot (or in a loop)")
    return sorted(members, key=lambda pair: len(pair[1]))


def _parts(name: str) -> list[str]:
    """A member's path as its components: relative, without ``.``; UnsafeArchive if absolute, empty or ``..``."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or not parts or ".." in parts or "\0" in name or len(name) > PATH_MAX:
        raise UnsafeArchive(f"snapshot member {name!r} does not name a path inside the snapshot")
    return parts


class _Links:
    """The archive's own symlinks, to resolve member paths against, in steps of constant cost.

    Each path prefix that leads to a symlink is a node (``(parent node,
    component)`` -> node): following one component is one dictionary look-up,
    however deep the path, and a prefix no link lies under is ``OFF`` (none of
    its extensions can be a link). Every resolution of one archive shares one
    budget of steps, so long link chains are refused, not followed for ever.
    """

    ROOT, OFF = 0, -1

    def __init__(self) -> None:
        self._nodes: dict[tuple[int, str], int] = {}
        self._targets: dict[int, str] = {}
        self._budget = LINK_WORK

    def add(self, parts: list[str], target: str) -> None:
        node = self.ROOT
        for part in parts:
            node = self._nodes.setdefault((node, part), len(self._nodes) + 1)
        self._targets[node] = target

    def crossed(self, parts: list[str]) -> bool:
        """Whether ``parts`` (or a folder above it) is one of the archive's symlinks."""
        node = self.ROOT
        for part in parts:
            node = self._nodes.get((node, part), self.OFF)
            if node == self.OFF:
                return False
            if node in self._targets:
                return True
        return False

    def stays_inside(self, parts: list[str]) -> bool:
        """Whether ``parts``, the archive's symlinks followed, stays under the root (a loop does not)."""
        trail = [self.ROOT]
        pending = deque(parts)
        hops = 0
        while pending:
            self._budget -= 1
            if self._budget < 0:
                raise UnsafeArchive(f"the snapshot's symlinks take over {LINK_WORK} steps to resolve")
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if len(trail) == 1:
                    return False
                trail.pop()
                continue
            node = self.OFF if trail[-1] == self.OFF else self._nodes.get((trail[-1], part), self.OFF)
            target = self._targets.get(node) if node != self.OFF else None
            if target is None:
                trail.append(node)
                continue
            hops += 1
            if hops > LINK_HOPS or target.startswith("/"):
                return False
            pending.extendleft(reversed(target.split("/")))
        return True


def _kind(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return f"a hard link to {member.linkname!r}"
    if member.sparse is not None or member.type == tarfile.GNUTYPE_SPARSE:
        return "a sparse file"
    return {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
            tarfile.FIFOTYPE: "a FIFO"}.get(member.type, f"of tar type {member.type!r}")
