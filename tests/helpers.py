"""Small helpers shared by test modules (not fixtures)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo"


def tribunal(*args: str, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a child process, as a user would."""
    return subprocess.run(
        [sys.executable, "-c", "from flows.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
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
