"""Unpacking a snapshot someone else wrote (SPEC §17): every member checked before one is written.

Each test is a publisher who crafts the tar a verifier's replay (or a run on
a shared registry) unpacks; a host file outside the destination must never
change, and the refusal names the member.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest

from registry._archive import UnsafeArchive, archive_tree, unpack_archive
from registry._bounds import Bounds
from registry._canonical import digest
from tasks.execution.workbench import Workbench
from tasks.execution.workspace import WorkspaceError, plain_copy

Member = tuple[tarfile.TarInfo, bytes | None]


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "", mode: int = 0o644) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, link, mode, len(data)
    return info, data if kind == tarfile.REGTYPE else None


def tar(*members: Member) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def unpack(data: bytes, destination: Path, bounds: Bounds | None = None) -> None:
    destination.mkdir()
    unpack_archive(data, destination, bounds or Bounds())


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host file no snapshot may reach."""
    path = tmp_path / "host" / "victim.txt"
    path.parent.mkdir()
    path.write_text("original\n")
    return path


def test_a_hard_link_to_a_host_file_followed_by_a_member_of_its_name_writes_nothing(
        tmp_path: Path, victim: Path, bench: Workbench) -> None:
    """Attack: a hard link to a host file, then a regular member of the same name: extraction writes through
    the link into the host file (tar's own filter checks the member's path, not the link's target)."""
    data = tar(member("evil", tarfile.LNKTYPE, link=str(victim)), member("evil", data=b"pwned\n"))
    with pytest.raises(WorkspaceError, match="'evil' is a hard link"):
        plain_copy(digest(data), lambda: data, tmp_path / "ws", bench)
    assert victim.read_text() == "original\n"


@pytest.mark.parametrize("members, named", [
    ([member("up", tarfile.SYMTYPE, link="../host"), member("up/victim.txt", data=b"pwned\n")], "outside"),
    ([member("d", tarfile.DIRTYPE, mode=0o755), member("l", tarfile.SYMTYPE, link="d"),
      member("l/x", data=b"through a link\n")], "lies below a symlink"),
    ([member("abs", tarfile.SYMTYPE, link="/etc")], "outside the snapshot"),
    ([member("d", tarfile.DIRTYPE, mode=0o755), member("d/a", tarfile.SYMTYPE, link=".."),
      member("b", tarfile.SYMTYPE, link="d/a/..")], "outside the snapshot"),
    ([member("loop", tarfile.SYMTYPE, link="loop")], "outside the snapshot (or in a loop)"),
    ([member("../host/victim.txt", data=b"pwned\n")], "does not name a path inside"),
    ([member("/abs.txt", data=b"x")], "does not name a path inside"),
    ([member("dev", tarfile.CHRTYPE)], "character device"),
    ([member("fifo", tarfile.FIFOTYPE)], "FIFO"),
    ([member("run", data=b"#!/bin/sh\n", mode=0o4755)], "setuid"),
    ([member("twice", data=b"a"), member("twice", data=b"b")], "comes twice"),
    ([member("twice", tarfile.DIRTYPE, mode=0o755), member("twice/", tarfile.DIRTYPE, mode=0o755)], "comes twice"),
    ([member(".git/config", data=b'[filter "x"]\n\tclean = id > /tmp/pwned\n')], "is git metadata"),
    ([member(".git", data=b"gitdir: /home/someone/repo/.git\n")], "is git metadata"),
    ([member("sub/.git/HEAD", data=b"ref: refs/heads/main\n")], "is git metadata"),
    ([member("long", tarfile.SYMTYPE, link="./" * 3000 + "x")], "links to a path over 4096 bytes"),
])
def test_a_member_that_could_write_outside_or_plant_a_special_file_is_refused_before_any_write(
        tmp_path: Path, victim: Path, members: list[Member], named: str) -> None:
    """Attack: links out of the tree (directly, through a chain, below a symlink), escaping names, devices,
    FIFOs, setuid files, names given twice, git metadata (a planted config's filter ran as the host's user when
    tribunal committed the tree; a ``gitdir`` file made it commit into another repository), a link target no
    path can be: each refused, and nothing at all is written."""
    data = tar(member("first.txt", data=b"written first?\n"), *members)
    with pytest.raises(UnsafeArchive, match=re.escape(named)):
        unpack(data, tmp_path / "out")
    assert victim.read_text() == "original\n"
    assert list((tmp_path / "out").iterdir()) == []


def test_an_archive_over_its_member_or_byte_cap_is_refused(tmp_path: Path) -> None:
    """Attack: a tar of many empty members (or of more bytes than a reader holds) exhausts the reader."""
    many = tar(*(member(f"f{n}") for n in range(11)))
    with pytest.raises(UnsafeArchive, match=r"over 10 members.*TRIBUNAL_MAX_ARCHIVE_MEMBERS"):
        unpack(many, tmp_path / "a", Bounds(archive_members=10))
    big = tar(member("a", data=b"x" * 600), member("b", data=b"x" * 600))
    with pytest.raises(UnsafeArchive, match=r"over 1000 bytes.*TRIBUNAL_MAX_OBJECT_MB"):
        unpack(big, tmp_path / "b", Bounds(object_bytes=1000))


def test_a_snapshot_tribunal_wrote_unpacks_to_the_same_tree(tmp_path: Path) -> None:
    """Directories, executables and symlinks inside the tree (a relative one, one into a folder) come back."""
    source = tmp_path / "src"
    (source / "pkg" / "sub").mkdir(parents=True)
    (source / "pkg" / "sub" / "mod.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "link").symlink_to("pkg/sub/mod.py")
    (source / "pkg" / "up").symlink_to("..")
    data = archive_tree(source)
    unpack(data, tmp_path / "out")
    assert archive_tree(tmp_path / "out") == data


def test_link_chains_that_take_too_long_to_resolve_are_refused(tmp_path: Path) -> None:
    """Attack: thousands of symlinks, each a long run of ``./``: resolving them all would spin for minutes."""
    links = [member(f"l{n}", tarfile.SYMTYPE, link="./" * 2000 + "x") for n in range(2100)]
    with pytest.raises(UnsafeArchive, match="take over 4000000 steps to resolve"):
        unpack(tar(member("x", data=b"x"), *links), tmp_path / "out")
