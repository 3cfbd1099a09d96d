"""Case validation: the gold patch K times and the empty patch once, through a run's grader boundary (SPEC §14).

Each control is graded exactly as a candidate's patch is -- ``tasks/grading.py``
with the case's frozen snapshot and prompt hash, the case's grader profile,
in the grader's sandbox -- under a fresh keyed scoring id, so the grader cannot
tell a control from a candidate (or the gold patch from the empty one) by
anything but the patch. The record (``registry/_validation.py``) is stored in
the registry; the ``validated`` admission rule reads it back in manifest order
(``validation_standing``). No Prefect here.
"""

from __future__ import annotations

import uuid

import pyarrow.compute as pc

from registry import (
    Config,
    ControlGrading,
    NewEntry,
    Plan,
    PlanCase,
    Registry,
    Role,
    ValidationRecord,
    canonical_json,
    case_status,
    digest,
    digest_json,
)
from tasks.attempts import case_grader_input
from tasks.execution.process import utc_timestamp
from tasks.execution.workbench import Workbench
from tasks.grading import Grading, grade

NO_RECORD = "no record"
LATE = "record made after a candidate ran"


def _control(registry: Registry, config: Config, case: PlanCase, patch: bytes, label: str,
             bench: Workbench) -> Grading:
    """Grade one control patch of a case under a fresh scoring id."""
    attempt_id = digest_json(["validation", case.id, label, uuid.uuid4().hex])
    return grade(attempt_id=attempt_id, profile_name=case.grader_profile, config=config,
                 grader_input=case_grader_input(case, case.grader_profile, registry.scoring_secret(), attempt_id,
                                                patch, "validation-control"),
                 snapshot=lambda: registry.get(case.snapshot_digest), patch=patch, bench=bench)


def _outcome(grading: Grading) -> ControlGrading:
    result = grading.result
    return ControlGrading(passed=result.passed, failure=result.failure, evidence_hash=result.evidence_hash)


def validate_case(registry: Registry, plan: Plan, case: PlanCase, config: Config, repeat: int,
                  bench: Workbench) -> ValidationRecord:
    """Grade the case's gold patch ``repeat`` times (if it has one) and the empty patch once; decide its status."""
    gold = registry.get(case.gold_patch_digest) if case.gold_patch_digest else None
    gold_gradings = [_control(registry, config, case, gold, f"gold-{n}", bench)
                     for n in range(repeat)] if gold is not None else []
    empty = _control(registry, config, case, b"", "empty", bench)
    for grading in [*gold_gradings, empty]:
        if grading.sandbox_profile:
            registry.put(grading.sandbox_profile)
    gold_runs = [_outcome(grading) for grading in gold_gradings]
    return ValidationRecord(
        experiment=plan.experiment, plan_hash=plan.plan_hash, case_id=case.id,
        snapshot_digest=case.snapshot_digest, prompt_hash=case.prompt_hash, gold_patch_digest=case.gold_patch_digest,
        grader_profile=case.grader_profile, grader_id=empty.result.grader_id,
        grader_version=empty.result.grader_version, grader_sha256=empty.result.grader_sha256,
        sandbox_profile=empty.receipt.sandbox_profile, repeat=repeat, gold=gold_runs, empty=_outcome(empty),
        status=case_status([run.passed for run in gold_runs] if gold is not None else None, empty.result.passed),
        validated_at=utc_timestamp(),
    )


def seal_validation(registry: Registry, record: ValidationRecord) -> str:
    """Store one record and append it (its own commit, so its manifest position dates it); return its digest.

    Every validation is a new entry, even one identical to an earlier record:
    the admission rule reads the newest that precedes the case's first run.
    """
    body = canonical_json(record.model_dump(mode="json"))
    record_digest = digest(body)
    registry.append([NewEntry(txn=f"validation:{record.plan_hash}:{record.case_id}:{uuid.uuid4().hex}",
                              role=Role.VALIDATION_RECORD.value, experiment_id=record.experiment,
                              digest=registry.put(body), size=len(body), grader_id=record.grader_id,
                              grader_version=record.grader_version)])
    return record_digest


def _same_case(record: ValidationRecord, case: PlanCase) -> bool:
    """A record holds for a case of another plan only if its bytes, prompt, gold patch and grader are the same."""
    return (record.case_id, record.snapshot_digest, record.prompt_hash, record.gold_patch_digest,
            record.grader_profile) == (case.id, case.snapshot_digest, case.prompt_hash, case.gold_patch_digest,
                                       case.grader_profile)


def first_runs(registry: Registry, plan: Plan) -> dict[str, int]:
    """The manifest position (seq) of the first entry of any attempt of each case: when a candidate first ran on it."""
    case_of = {ref.attempt_id: ref.case_id for ref in plan.attempt_refs()}
    table = registry.table()
    first: dict[str, int] = {}
    if table.num_rows == 0:
        return first
    table = table.filter(pc.equal(table.column("experiment_id"), plan.experiment))
    for seq, attempt in zip(table.column("seq").to_pylist(), table.column("attempt_id").to_pylist(), strict=True):
        case_id = case_of.get(attempt) if attempt else None
        if case_id is not None and case_id not in first:
            first[case_id] = seq
    return first


def validation_records(registry: Registry, plan: Plan) -> list[tuple[int, ValidationRecord]]:
    """Every validation record stored for the plan's experiment, with its manifest seq, oldest first."""
    return [(entry.seq, registry.load(entry.digest, ValidationRecord))
            for entry in registry.entries(experiment_id=plan.experiment, role=Role.VALIDATION_RECORD.value)]


def validation_standing(registry: Registry, plan: Plan) -> dict[str, str]:
    """Each case's standing under a ``validated`` rule: the status of its newest record made before any candidate
    ran on it, or why there is none (``no record``, ``record made after a candidate ran``).

    Order is manifest order (``seq``): a record appended after the case's first
    attempt entry was made knowing outcomes could exist, so it does not count.
    """
    first = first_runs(registry, plan)
    records = validation_records(registry, plan)
    standing = {}
    for case in plan.cases:
        mine = [(seq, record) for seq, record in records if _same_case(record, case)]
        before = [record for seq, record in mine if case.id not in first or seq < first[case.id]]
        standing[case.id] = before[-1].status if before else (LATE if mine else NO_RECORD)
    return standing
