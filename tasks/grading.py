"""The executable-grader boundary (SPEC §5.3-§5.4). No Prefect here.

Every rule is mandatory and every failure fails closed *with records*:
input, output, result and receipt are written whatever happened, with
``passed=false`` and the failure class in the result. Only the boolean
``passed`` decides; the whole stdout is retained as evidence. Failure
messages name a class of failure, never the grader's own output, so a
grader cannot smuggle text into receipts or CLI errors.

``.py`` graders are run by the interpreter running tribunal (argv
``[python, path]``); anything else is executed directly. Both are pinned by
the SHA-256 of the file, checked before and after the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from registry import Config, GraderInput, GraderProfile, GraderReceipt, GraderResult, canonical_json, digest
from tasks.process import run_program
from tasks.sealing import seal_receipt
from tasks.workbench import Workbench
from tasks.workspace import Snapshot, WorkspaceError, apply_patch, plain_copy

UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Grading:
    """The four records of one grading, as bytes ready to store, plus the models."""

    input_bytes: bytes
    output_bytes: bytes
    result: GraderResult
    receipt: GraderReceipt

    @property
    def result_bytes(self) -> bytes:
        return canonical_json(self.result.model_dump(mode="json"))

    @property
    def receipt_bytes(self) -> bytes:
        return canonical_json(self.receipt.model_dump(mode="json"))


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def check_grader_file(profile: GraderProfile) -> str | None:
    """Return why the pinned file may not run, or None: regular file, not a link, hash matches."""
    path = Path(profile.path)
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "grader file not found"
    if stat.S_ISLNK(mode):
        return "grader file is a symlink"
    if not stat.S_ISREG(mode):
        return "grader file is not a regular file"
    if _file_sha256(path) != profile.sha256:
        return "grader file sha256 does not match the profile"
    return None


def interpret_output(exit_code: int | None, timed_out: bool, overflow: int, spawn_error: str | None,
                     stdout: bytes, timeout_s: float) -> tuple[bool, str | None]:
    """Apply the output contract: exit 0, one JSON object, a boolean ``passed``."""
    if spawn_error is not None:
        return False, "grader could not be started"
    if timed_out:
        return False, f"grader timed out after {timeout_s:g} s"
    if overflow:
        return False, "grader output exceeds max_output_bytes"
    if exit_code != 0:
        return False, f"grader exited with code {exit_code}"
    try:
        answer = json.loads(stdout)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False, "grader output is not JSON"
    if not isinstance(answer, dict):
        return False, "grader output is not a JSON object"
    if "passed" not in answer:
        return False, "grader output has no 'passed'"
    if not isinstance(answer["passed"], bool):
        return False, "grader 'passed' is not a boolean"
    return answer["passed"], None


def _argv(path: Path) -> list[str]:
    return [sys.executable, str(path)] if path.suffix == ".py" else [str(path)]


def _run_grader(profile: GraderProfile, input_bytes: bytes, snapshot_digest: str, snapshot: Snapshot,
                patch: bytes, bench: Workbench) -> tuple[bytes, bool, str | None]:
    with tempfile.TemporaryDirectory(prefix="grade-", dir=bench.scratch) as tmp:
        workspace = Path(tmp) / "workspace"
        plain_copy(snapshot_digest, snapshot, workspace, bench)
        try:
            apply_patch(workspace, patch)
        except WorkspaceError:
            return b"", False, "retained patch does not apply to the case snapshot"
        outcome = run_program(
            _argv(Path(profile.path)), cwd=workspace, env={"PATH": os.environ.get("PATH", "")},
            stdin=input_bytes, timeout_s=profile.timeout_s, max_output_bytes=profile.max_output_bytes,
            slot=bench.slots,
        )
    passed, failure = interpret_output(outcome.exit_code, outcome.timed_out, outcome.stdout_overflow,
                                       outcome.spawn_error, outcome.stdout, profile.timeout_s)
    if failure is None and _file_sha256(Path(profile.path)) != profile.sha256:
        return outcome.stdout, False, "grader file changed while grading"
    return outcome.stdout, passed, failure


def grade(*, attempt_id: str, profile_name: str, config: Config, grader_input: GraderInput,
          snapshot: Snapshot, patch: bytes, bench: Workbench) -> Grading:
    """Grade one attempt through the boundary; never raises for a grader's fault."""
    input_bytes = canonical_json(grader_input.model_dump(mode="json"))
    profile = config.grader_profiles.get(profile_name)
    output, passed = b"", False
    failure: str | None
    if profile is None:
        grader_id, version, failure = f"missing:{profile_name}", UNAVAILABLE, "grader profile is not configured"
    elif not profile.grader_id.strip() or not profile.version.strip():
        grader_id, version, failure = f"missing:{profile_name}", UNAVAILABLE, "grader profile has a blank grader_id or version"
    else:
        grader_id, version = profile.grader_id, profile.version
        failure = check_grader_file(profile)
        if failure is None:
            output, passed, failure = _run_grader(
                profile, input_bytes, grader_input.contract.snapshot_digest, snapshot, patch, bench
            )
    result = GraderResult(
        attempt_id=attempt_id, grader_id=grader_id, grader_version=version, required=True,
        passed=passed and failure is None, evidence_hash=digest(output), failure=failure,
    )
    receipt = seal_receipt(
        {
            "attempt_id": attempt_id, "grader_profile": profile_name, "grader_id": grader_id,
            "grader_version": version, "required": True, "passed": result.passed,
            "input_hash": digest(input_bytes), "output_hash": digest(output),
            "result_hash": digest(canonical_json(result.model_dump(mode="json"))),
        }
    )
    return Grading(input_bytes=input_bytes, output_bytes=output, result=result, receipt=receipt)
