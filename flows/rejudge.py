"""The ``rejudge`` flow: judge retained candidate truth again under the current judge policy (SPEC §6).

Never runs a candidate. Each attempt gets a durable intent before its judge
call and judgement generation n+1 after it (``tasks/rejudge.py``). Attempts
with an unproven earlier intent are refused and listed; the others proceed.
The canonical experiment record is then rewritten with a mutation receipt.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict

from registry import Config, Registry, find_config, load_config, load_plan, tune_allocators
from tasks.attempts import AttemptState, attempt_states
from tasks.progress import attempt_done
from tasks.regrade import EvidenceMissing, RegradeOutcome, first_missing_evidence, latest_record_digest, record_mutation
from tasks.rejudge import IntentOpen, rejudge_attempt
from tasks.report import build_report, current_summaries, head_label, seal_experiment_record
from tasks.steps import step
from tasks.workbench import Workbench, workbench

BATCH = 25


class RejudgeSummary(BaseModel):
    """What one rejudge did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    experiment: str
    plan_hash: str
    judge: str | None
    attempts: int
    judged: int
    judges: list[str]
    refused: list[str]
    record: str
    report: dict[str, object]


@step("rejudge-attempts")
def rejudge_batch(attempt_ids: list[str], experiment: str, registry: Registry, config: Config, judge: str | None,
                  bench: Workbench) -> tuple[list[RegradeOutcome], list[str]]:
    """Rejudge a batch in order; attempts with an unproven intent are refused, not fatal."""
    states = attempt_states(registry, experiment, attempt_ids)
    outcomes, refused = [], []
    for attempt_id in attempt_ids:
        try:
            outcomes.append(rejudge_attempt(registry, states.get(attempt_id, AttemptState({})), attempt_id, config,
                                            judge, bench))
            attempt_done("rejudged")
        except IntentOpen as refusal:
            refused.append(str(refusal))
            attempt_done("refused")
    return outcomes, refused


def run_name() -> str:
    """``rejudge-<experiment>-<judge>``, as operators see it in the UI."""
    try:
        params = flow_run.parameters
        return f"rejudge-{load_plan(Path(params['plan_path'])).experiment}-{params.get('judge') or 'plan-judges'}"
    except Exception:  # naming must never fail a run; the flow reports bad input itself
        return "rejudge"


@flow(name="rejudge", flow_run_name=run_name)
def rejudge(plan_path: str, registry_url: str, config_path: str | None = None, judge: str | None = None,
            concurrency: int = 2) -> RejudgeSummary:
    """Judge every attempt of a plan again with the current judge policy; never runs a candidate."""
    tune_allocators()
    plan = load_plan(Path(plan_path))
    config = load_config(find_config(config_path))
    registry = Registry.open(registry_url)
    previous = latest_record_digest(registry, plan)
    head_before = head_label(registry)
    work = [ref.attempt_id for ref in plan.attempt_refs()]
    stop = first_missing_evidence(registry, plan.experiment, work)
    progress = create_progress_artifact(progress=0.0, description=f"rejudge {plan.experiment}")
    outcomes: list[RegradeOutcome] = []
    refused: list[str] = []
    with workbench(concurrency, prefix="tribunal-rejudge-") as bench, \
            ThreadPoolTaskRunner(max_workers=bench.preparers) as runner:
        futures = [runner.submit(rejudge_batch, {"attempt_ids": work[start : start + BATCH], "experiment": plan.experiment,
                                                 "registry": registry, "config": config, "judge": judge, "bench": bench})
                   for start in range(0, len(work) if stop is None else stop, BATCH)]
        for done, future in enumerate(futures, start=1):
            batch_outcomes, batch_refused = future.result()
            outcomes += batch_outcomes
            refused += batch_refused
            update_progress_artifact(progress, progress=100.0 * min(len(work), done * BATCH) / max(1, len(work)))
    if stop is not None:
        raise EvidenceMissing(f"candidate evidence missing for {work[stop]}")
    summaries = current_summaries(registry, plan)
    _, new_record = seal_experiment_record(registry, plan, summaries)
    judged = [o for o in outcomes if o.changed]
    record_mutation(registry, plan, previous, new_record, None, judged, head_before, operation="rejudge")
    return RejudgeSummary(
        experiment=plan.experiment, plan_hash=plan.plan_hash, judge=judge, attempts=len(work), judged=len(judged),
        judges=sorted({f"{o.grader_id}@{o.grader_version}" for o in judged}), refused=refused, record=new_record,
        report=build_report(registry, plan, summaries=summaries),
    )
