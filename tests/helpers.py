"""Small helpers shared by test modules (not fixtures)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo"


def tribunal(*args: str, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a child process, as a user would.

    The child imports this checkout (``PYTHONPATH``), not whatever an editable
    install of the virtualenv points at: a git worktree must test its own code.
    """
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), child_env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", "from flows.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env,
        timeout=600,
        check=False,
    )


def copy_demo(target: Path) -> Path:
    """Copy the demo experiment so a test may change it; return experiment.toml."""
    shutil.copytree(DEMO, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target / "experiment.toml"


def install_grader(config: Path, source: str, version: str) -> None:
    """Install new grader bytes under the demo's profile, pinned in tribunal.toml with a new version."""
    grader = config.parent / "graders" / "run_tests.py"
    grader.write_text(source)
    sha = hashlib.sha256(grader.read_bytes()).hexdigest()
    text = config.read_text()
    old_sha = text.split('sha256 = "')[1].split('"')[0]
    old_version = text.split('version = "')[1].split('"')[0]
    config.write_text(text.replace(old_sha, sha).replace(f'version = "{old_version}"', f'version = "{version}"'))


def processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``: what a sandbox left behind."""
    time.sleep(0.2)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found
