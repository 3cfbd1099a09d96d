"""Calibration status behind every number of a report (SPEC §8; seed 004, "A grader release gate").

A report names, for every grader version behind its numbers, whether that
version has a passing calibration record; the newest record for that grader
id and version decides. A failed or missing gate blocks interpreting the
numbers: reports flag them, and publishing refuses them (``tasks/publish.py``).
"""

from __future__ import annotations

from typing import Any

from registry import CALIBRATION_EXPERIMENT, CalibrationRecord, Registry, Role


def calibration_status(registry: Registry, graders: list[str]) -> dict[str, dict[str, Any]]:
    """For each ``id@version``: passed / failed / uncalibrated, the deciding record and its gate failures."""
    newest: dict[str, str] = {}
    for entry in registry.entries(experiment_id=CALIBRATION_EXPERIMENT, role=Role.CALIBRATION_RECORD.value):
        newest[f"{entry.grader_id}@{entry.grader_version}"] = entry.digest
    status = {}
    for grader in graders:
        if grader not in newest:
            status[grader] = {"status": "uncalibrated", "record": None,
                              "failures": [f"calibration: {grader} has no calibration record"]}
            continue
        record = registry.load(newest[grader], CalibrationRecord)
        status[grader] = {"status": "passed" if record.decision.passed else "failed", "record": newest[grader],
                          "failures": [f"calibration of {grader}: {failure}" for failure in record.decision.failures]}
    return status
