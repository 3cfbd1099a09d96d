"""Grading a calibration set through the same grader boundary as a run (SPEC §8; seed 004).

Each item becomes the grader input a run would build: for a retained
attempt, exactly the input a regrade gives it; for a case and a patch, the
case's frozen snapshot and prompt hash from the plan with the patch as the
candidate's. The grader never sees the item id, the adjudicated label, the
stratum or the adjudicator: its scoring id is derived from the set digest
and the item id. The gate decision and every item's outcome are sealed in
one calibration record in the registry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from registry import (
    CALIBRATION_EXPERIMENT,
    BlindedContract,
    CalibrationItem,
    CalibrationRecord,
    CalibrationSet,
    Config,
    Gate,
    GraderInput,
    NewEntry,
    Outcome,
    Plan,
    Registry,
    Role,
    UsageError,
    calibration_record,
    canonical_json,
    digest,
    digest_json,
)
from tasks.attempts import attempt_states, grader_input_for, scoring_id
from tasks.grading import grade
from tasks.regrade import retained_evidence
from tasks.workbench import Workbench


@dataclass(frozen=True)
class Subject:
    """What the grader is shown for one item."""

    item: CalibrationItem
    grader_input: GraderInput
    snapshot: Callable[[], bytes]
    patch: bytes


def item_attempt_id(set_digest: str, item_id: str) -> str:
    """A stable attempt id for an item: binds the grading records to the set and the item."""
    return digest_json(["calibration", set_digest, item_id])


def subjects(registry: Registry, calibration_set: CalibrationSet, plan: Plan | None, profile: str) -> list[Subject]:
    """Build every item's grader input, refusing items whose case or attempt cannot be found."""
    cases = {case.id: case for case in plan.cases} if plan else {}
    attempts = [item.attempt for item in calibration_set.items if item.attempt]
    states = {}
    if attempts:
        for experiment in {entry.experiment_id for entry in registry.entries(attempt_ids=attempts)}:
            states.update(attempt_states(registry, experiment, attempts))
    made = []
    for item in calibration_set.items:
        if item.attempt is not None:
            if item.attempt not in states:
                raise UsageError(f"calibration item {item.item_id}: attempt {item.attempt} is not in registry {registry.url}")
            retained = retained_evidence(registry, states[item.attempt], item.attempt, profile)
            snapshot_digest = retained.contract.snapshot_digest
            made.append(Subject(item, grader_input_for(retained), lambda d=snapshot_digest: registry.get(d),
                                retained.patch))
            continue
        case = cases.get(item.case or "")
        if case is None:
            where = "pass --plan with the plan that froze it" if plan is None else f"plan {plan.experiment} has no such case"
            raise UsageError(f"calibration item {item.item_id}: case {item.case!r} unknown ({where})")
        patch = (item.patch or "").encode()
        attempt_id = item_attempt_id(calibration_set.set_digest, item.item_id)
        grader_input = GraderInput(
            contract=BlindedContract(case_id=case.id, snapshot_digest=case.snapshot_digest,
                                     prompt_hash=case.prompt_hash, scoring_id=scoring_id(attempt_id)),
            grader_profile=profile, candidate_succeeded=True, patch_digest=digest(patch),
            terminal_evidence_digest=digest_json(["calibration-item", attempt_id]), patch=patch.decode(),
        )
        made.append(Subject(item, grader_input, lambda d=case.snapshot_digest: registry.get(d), patch))
    return made


def grade_subject(subject: Subject, set_digest: str, profile: str, config: Config, bench: Workbench) -> Outcome:
    """Grade one item through the boundary; a grader fault is an outcome, never an exception."""
    grading = grade(attempt_id=item_attempt_id(set_digest, subject.item.item_id), profile_name=profile, config=config,
                    grader_input=subject.grader_input, snapshot=subject.snapshot, patch=subject.patch, bench=bench)
    return Outcome(item_id=subject.item.item_id, stratum=subject.item.stratum, label=subject.item.label,
                   passed=grading.result.passed, failure=grading.result.failure)


def seal_calibration(registry: Registry, calibration_set: CalibrationSet, profile: str, config: Config,
                     outcomes: list[Outcome]) -> tuple[CalibrationRecord, str]:
    """Store the set and the record (one commit); return the record and its digest.

    Every calibration is its own entry, even with a record identical to an
    earlier one: the newest entry for a grader version decides its status.
    """
    configured = config.grader_profiles.get(profile)
    grader_id = configured.grader_id if configured else f"missing:{profile}"
    version = configured.version if configured else "unavailable"
    record = calibration_record(
        subject="grader", profile=profile, grader_id=grader_id, grader_version=version,
        sha256=configured.sha256 if configured else "", calibration_set=calibration_set,
        gate=configured.gate if configured else Gate(),
        outcomes=sorted(outcomes, key=lambda o: o.item_id),
    )
    set_body = canonical_json(calibration_set.model_dump(mode="json"))
    body = canonical_json(record.model_dump(mode="json"))
    record_digest = digest(body)
    registry.append([
        NewEntry(txn=f"calibration-set:{calibration_set.set_digest}", role=Role.CALIBRATION_SET.value,
                 experiment_id=CALIBRATION_EXPERIMENT, digest=registry.put(set_body), size=len(set_body)),
        NewEntry(txn=f"calibration:{record_digest}:{uuid.uuid4().hex}", role=Role.CALIBRATION_RECORD.value,
                 experiment_id=CALIBRATION_EXPERIMENT,
                 digest=registry.put(body), size=len(body), grader_id=grader_id, grader_version=version),
    ])
    return record, record_digest
