"""Case validation records: gold and null controls of one case (SPEC §14). Pure, no I/O.

SWE-bench's longest-running complaint is a case whose reference fix fails,
or passes only sometimes: it counts against every candidate and no number
says so. ``tribunal validate`` grades the case's gold patch K times and the
empty patch once through the grader a run uses; the record keeps every
grading's outcome, and its status follows from them (the model refuses a
record whose status does not):

* ``vacuous`` -- the empty patch passed: the case measures nothing;
* ``no-gold`` -- no gold patch was declared, so nothing shows the case can pass;
* ``broken`` -- the gold patch failed every time;
* ``flaky`` -- it passed some times, not all;
* ``valid`` -- it passed K of K, and the empty patch failed.

Records are stored in the registry like calibration records (role
``validation-record``); the ``validated`` admission rule reads them in
manifest order (``tasks/measurement/admission.py``). Signing them is left to
the signing layer, which seals every stored record the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from registry._models import Digest, Strict

ValidationStatus = Literal["valid", "flaky", "broken", "vacuous", "no-gold"]


def case_status(gold_passed: list[bool] | None, empty_passed: bool) -> ValidationStatus:
    """The rule above: ``gold_passed`` is one boolean per gold grading, None without a gold patch."""
    if empty_passed:
        return "vacuous"
    if gold_passed is None:
        return "no-gold"
    if not any(gold_passed):
        return "broken"
    return "valid" if all(gold_passed) else "flaky"


class ControlGrading(Strict):
    """One grading of a control patch: only ``passed`` decides; the grader's output is kept by digest."""

    passed: bool
    failure: str | None = None
    evidence_hash: Digest


class ValidationRecord(Strict):
    """What validating one case established, with the grader and the case bytes it holds for."""

    schema_version: Literal["tribunal.validation_record.v1"] = "tribunal.validation_record.v1"
    experiment: str
    plan_hash: Digest
    case_id: str
    snapshot_digest: Digest
    prompt_hash: Digest
    gold_patch_digest: Digest | None
    grader_profile: str
    grader_id: str
    grader_version: str
    grader_sha256: str | None
    sandbox_profile: Digest | None
    repeat: int = Field(ge=1)
    gold: list[ControlGrading]
    """Empty without a gold patch; otherwise ``repeat`` gradings."""
    empty: ControlGrading
    status: ValidationStatus
    validated_at: str

    @model_validator(mode="after")
    def _status_follows(self) -> ValidationRecord:
        expected_runs = 0 if self.gold_patch_digest is None else self.repeat
        if len(self.gold) != expected_runs:
            raise ValueError(f"{len(self.gold)} gold gradings recorded, {expected_runs} expected")
        gold = None if self.gold_patch_digest is None else [run.passed for run in self.gold]
        if self.status != case_status(gold, self.empty.passed):
            raise ValueError(f"status {self.status!r} does not follow from the gradings")
        return self

    @property
    def gold_passed(self) -> int:
        return sum(run.passed for run in self.gold)
