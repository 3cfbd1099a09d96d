"""The ``validate`` flow: gold and null controls of every case before candidates run on it (SPEC §14).

Cases are validated in tasks through the grader boundary
(``tasks/validation.py``), as many graders at a time as ``concurrency``
allows; each case's record is sealed in the registry as soon as it is
decided, so its manifest position predates any candidate run that follows.
The UI gets the per-case table as an artifact.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict

from flows.artifacts import artifact_key
from flows.opening import graders, open_target
from flows.requests import ValidateRequest, run_namer
from registry import (
    Config,
    Plan,
    PlanCase,
    Registry,
    ValidationRecord,
    load_plan,
)
from tasks.execution.workbench import Workbench, workbench
from tasks.steps import step
from tasks.validation import seal_validation, validate_case


class ValidatedCase(BaseModel):
    """One case's record and where it is stored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_digest: str
    record: ValidationRecord


class ValidationSummary(BaseModel):
    """Every case's validation, in plan order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    experiment: str
    plan_hash: str
    repeat: int
    cases: list[ValidatedCase]


@step("validate-case")
def validate_one(case: PlanCase, plan: Plan, config: Config, repeat: int, registry: Registry,
                 bench: Workbench) -> ValidatedCase:
    """Grade one case's controls and seal its record."""
    record = validate_case(registry, plan, case, config, repeat, bench)
    return ValidatedCase(record_digest=seal_validation(registry, record), record=record)


def describe(request: ValidateRequest) -> str:
    """``<experiment>-x<repeat>``, as operators see it in the UI."""
    return f"{load_plan(Path(request.plan_path)).experiment}-x{request.repeat}"


@flow(name="validate", flow_run_name=run_namer("validate", ValidateRequest, describe))
def validate(request: ValidateRequest) -> ValidationSummary:
    """Validate every case of the plan with its grader profile's current bytes."""
    opened = open_target(request, graders)
    plan, config, registry = opened.plan, opened.config, opened.registry
    with workbench(request.concurrency, prefix="tribunal-validate-") as bench, \
            ThreadPoolTaskRunner[ValidatedCase](max_workers=bench.preparers) as runner:
        futures = [runner.submit(validate_one, {"case": case, "plan": plan, "config": config,
                                                "repeat": request.repeat, "registry": registry, "bench": bench})
                   for case in plan.cases]
        cases = [future.result() for future in futures]
    create_table_artifact(
        [{"case": item.record.case_id, "status": item.record.status,
          "gold_passed": f"{item.record.gold_passed}/{item.record.repeat}" if item.record.gold_patch_digest else "-",
          "empty_passed": item.record.empty.passed, "record": item.record_digest} for item in cases],
        key=artifact_key("validation", plan.experiment),
        description=f"{plan.experiment}: gold patch graded {request.repeat} time(s), empty patch once",
    )
    return ValidationSummary(experiment=plan.experiment, plan_hash=plan.plan_hash, repeat=request.repeat,
                             cases=cases)
