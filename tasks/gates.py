"""Calibration status behind every number of a report (SPEC §8; seed 004, "A grader release gate").

A report names, for every grader version and judge policy behind its
numbers, whether it has a passing calibration record; the newest record for
that grader id and version (or that judge policy hash) decides. A failed or missing gate blocks interpreting the
numbers: reports flag them, and publishing refuses them (``tasks/publish.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from registry import CALIBRATION_EXPERIMENT, CalibrationRecord, Registry, Role


def judge_key(policy: str) -> str:
    """How a judge policy is named beside grader ``id@version`` keys in a report's calibration status."""
    return f"judge:{policy}"


def _status(subject: str, found: tuple[str, CalibrationRecord] | None) -> dict[str, Any]:
    if found is None:
        return {"status": "uncalibrated", "record": None,
                "failures": [f"calibration: {subject} has no calibration record"]}
    record_digest, record = found
    return {"status": "passed" if record.decision.passed else "failed", "record": record_digest,
            "failures": [f"calibration of {subject}: {failure}" for failure in record.decision.failures]}


def calibration_status(registry: Registry, graders: Sequence[str],
                       judge_policies: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Status of each grader ``id@version`` and each judge policy hash (keyed ``judge:<hash>``).

    Graders are matched by id and version (the entry's columns); judges by the
    policy hash their judgements carry, which the calibration record pins.
    """
    entries = registry.entries(experiment_id=CALIBRATION_EXPERIMENT, role=Role.CALIBRATION_RECORD.value)
    newest: dict[str, str] = {f"{e.grader_id}@{e.grader_version}": e.digest for e in entries}
    status = {grader: _status(grader, (newest[grader], registry.load(newest[grader], CalibrationRecord))
                              if grader in newest else None) for grader in graders}
    if judge_policies:
        by_policy: dict[str, tuple[str, CalibrationRecord]] = {}
        for entry in entries:
            if (entry.grader_id or "").startswith("judge:"):
                record = registry.load(entry.digest, CalibrationRecord)
                by_policy[record.sha256] = (entry.digest, record)
        status.update({judge_key(policy): _status(f"judge policy {policy}", by_policy.get(policy))
                       for policy in judge_policies})
    return status
