"""Fresh workspaces: a case snapshot as a git checkout, the patch a run left, applying it.

Each case snapshot is unpacked and committed once per workbench into a
template whose ``.git`` is packed down to a handful of files; every attempt
gets a copy of that template (new files, its own ``.git``), so no attempt can
see another's leftovers. The snapshot bytes are read from the registry only
when a template is built, not once per attempt. ``git`` runs with no
user or system config (``HOME`` is a temp dir, ``GIT_CONFIG_NOSYSTEM=1``) so
an operator's hooks or aliases cannot change a patch.

The patch is ``git add -A`` + ``git diff --cached --binary``: new untracked
files and binary changes included. If no file's size or mtime changed, the
patch is empty without running git (the same stat heuristic git's index uses).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from registry import RegistryError
from tasks.execution.workbench import Workbench

GIT_IDENTITY = ["-c", "user.name=tribunal", "-c", "user.email=tribunal@localhost", "-c", "commit.gpgsign=false"]


class WorkspaceError(RegistryError):
    """A snapshot could not be materialized or a patch could not be made or applied."""


def git_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "GIT_CEILING_DIRECTORIES": str(home.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }


def git(args: list[str], cwd: Path, stdin: bytes = b"") -> bytes:
    """Run git with a clean environment; raise WorkspaceError with its message on failure."""
    result = subprocess.run(
        ["git", *GIT_IDENTITY, *args], cwd=cwd, input=stdin, capture_output=True, env=git_env(cwd), check=False
    )
    if result.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {result.stderr.decode(errors='replace').strip()[:500]}")
    return result.stdout


def _stats(root: Path) -> dict[str, tuple[int, int, int]]:
    found = {}
    for directory, dirnames, filenames in os.walk(root):
        if directory == str(root):
            dirnames[:] = [name for name in dirnames if name != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            found[os.path.relpath(path, root)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return found


Snapshot = Callable[[], bytes]
"""Reads a case snapshot (a deterministic tar) when a template has to be built."""


def _template(snapshot_digest: str, snapshot: Snapshot, bench: Workbench) -> Path:
    with bench.templates_lock:
        cached = bench.templates.get(snapshot_digest)
        if cached is not None:
            return cached
        template = Path(tempfile.mkdtemp(prefix="tribunal-case-", dir=bench.scratch))
        with tarfile.open(fileobj=io.BytesIO(snapshot())) as archive:
            archive.extractall(template, filter="tar")
        git(["init", "-q", "--template="], template)
        git(["add", "-A"], template)
        git(["commit", "-q", "--allow-empty", "-m", "snapshot"], template)
        git(["repack", "-a", "-d", "-q", "-n"], template)
        git(["pack-refs", "--all", "--prune"], template)
        for leftover in ("logs", "COMMIT_EDITMSG", "refs/heads", "refs/tags", "objects/info"):
            path = template / ".git" / leftover
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        bench.templates[snapshot_digest] = template
        return template


def checkout(snapshot_digest: str, snapshot: Snapshot, target: Path,
             bench: Workbench) -> dict[str, tuple[int, int, int]]:
    """Materialize a snapshot as a git checkout at ``target``; return its file stats."""
    template = _template(snapshot_digest, snapshot, bench)
    shutil.copytree(template, target, symlinks=True)
    return _stats(target)


def plain_copy(snapshot_digest: str, snapshot: Snapshot, target: Path, bench: Workbench) -> None:
    """Materialize a snapshot's files at ``target`` without git metadata (grader workspaces)."""
    template = _template(snapshot_digest, snapshot, bench)
    shutil.copytree(template, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))


def workspace_patch(workspace: Path, baseline: dict[str, tuple[int, int, int]]) -> bytes:
    """Return the binary diff of everything a run changed, new files included."""
    if _stats(workspace) == baseline:
        return b""
    git(["add", "-A"], workspace)
    return git(["diff", "--cached", "--binary", "HEAD"], workspace)


def apply_patch(workspace: Path, patch: bytes) -> None:
    """Apply a (possibly binary) patch to a workspace; WorkspaceError if it does not apply.

    ``GIT_CEILING_DIRECTORIES`` stops git from adopting a repository *above* a
    plain workspace, which would make it resolve the patch's paths from there.
    """
    if patch.strip():
        git(["apply", "--binary", "--whitespace=nowarn", "-"], workspace, stdin=patch)
