"""Deterministic case snapshots: same tree, same digest; links stored, never followed."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from registry import SpecError
from registry._archive import archive_tree


def make_tree(root: Path, order: list[str]) -> None:
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {name}\n")


def test_same_tree_same_bytes_whatever_mtimes_and_creation_order(tmp_path: Path) -> None:
    make_tree(tmp_path / "a", ["x.py", "pkg/b.py", "pkg/a.py", "z/y.txt"])
    make_tree(tmp_path / "b", ["z/y.txt", "pkg/a.py", "x.py", "pkg/b.py"])
    os.utime(tmp_path / "b" / "x.py", (1, 1))
    (tmp_path / "b" / "pkg" / "a.py").chmod(0o600)
    assert archive_tree(tmp_path / "a") == archive_tree(tmp_path / "b")


def test_git_metadata_is_excluded_at_any_depth(tmp_path: Path) -> None:
    """A nested ``.git`` (a file, as in a submodule or worktree, or a directory) never reaches the snapshot."""
    make_tree(tmp_path / "a", ["x.py", "sub/y.py", "deep/er/z.py"])
    make_tree(tmp_path / "b", ["x.py", ".git/HEAD", "sub/y.py", "sub/.git", "deep/er/z.py", "deep/er/.git/config"])
    assert (tmp_path / "b" / "sub" / ".git").is_file() and (tmp_path / "b" / "deep" / "er" / ".git").is_dir()
    assert archive_tree(tmp_path / "a") == archive_tree(tmp_path / "b")
    with tarfile.open(fileobj=io.BytesIO(archive_tree(tmp_path / "b"))) as archive:
        assert not [name for name in archive.getnames() if ".git" in name.split("/")]


def test_executable_bit_is_kept(tmp_path: Path) -> None:
    make_tree(tmp_path, ["run.sh"])
    before = archive_tree(tmp_path)
    (tmp_path / "run.sh").chmod(0o755)
    assert archive_tree(tmp_path) != before


def test_symlinks_are_stored_as_links_and_never_followed(tmp_path: Path) -> None:
    """Attack: a case repo with a link pointing outside it must not pull outside files into the store."""
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("TOP SECRET")
    repo = tmp_path / "repo"
    make_tree(repo, ["x.py"])
    (repo / "leak").symlink_to(secret)
    (repo / "dirlink").symlink_to(tmp_path)
    data = archive_tree(repo)
    assert b"TOP SECRET" not in data
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = {member.name: member for member in archive.getmembers()}
    assert members["leak"].issym() and members["leak"].linkname == str(secret)
    assert members["dirlink"].issym()
    assert sorted(members) == ["dirlink", "leak", "x.py"]


def test_special_files_are_refused(tmp_path: Path) -> None:
    make_tree(tmp_path, ["x.py"])
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SpecError, match="not a regular file"):
        archive_tree(tmp_path)
