"""Prefect tasks of the evaluate flow: thin wrappers over the pure and I/O logic.

Granularity follows shared/notes/prefect.md: a task costs ~5 ms on the
client and ~40 ms of server CPU, so tasks work on *batches* of attempts,
one task per step (candidates, redaction+retention, grading). Unredacted
candidate output crosses from the first task to the second in memory only:
``persist_result=False`` keeps Prefect from writing it anywhere.

Retries are for infrastructure only (storage or network I/O). A candidate that
fails or times out is evidence, and a redaction leak is a refusal: neither is
retried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun

from registry import AttemptContract, Config, Plan, Registry
from registry._errors import CommitOutcomeUnknown
from tasks.attempts import grade_retained
from tasks.candidate import CandidateRun, execute_candidate
from tasks.progress import attempt_done
from tasks.redaction import RedactionLeak
from tasks.retain import RetainedAttempt, retain_candidate


def infrastructure_failure(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only when storage or the network failed, never for a verdict or a refusal."""
    try:
        state.result()
    except (OSError, CommitOutcomeUnknown):
        return True
    except BaseException:
        return False
    return False


def step(name: str) -> Any:
    """The task decorator every evaluate step shares: no caching, no persisted results, infra retries."""
    return task(name=name, cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1,
                retry_condition_fn=infrastructure_failure)


@step("execute-candidates")
def execute_candidates(contracts: list[AttemptContract], plan: Plan, config: Config, registry: Registry,
                       scratch: Path) -> list[CandidateRun]:
    """Run each attempt's candidate in a fresh workspace (unredacted results stay in memory)."""
    candidates = {candidate.id: candidate for candidate in plan.candidates}
    return [
        execute_candidate(contract, plan, candidates[contract.candidate_id], config, registry, scratch)
        for contract in contracts
    ]


@step("redact-and-retain")
def redact_and_retain(runs: list[CandidateRun], config: Config, registry: Registry) -> list[RetainedAttempt | str]:
    """Redact, re-scan and store each run; a leak stops that attempt (its message is returned)."""
    kept: list[RetainedAttempt | str] = []
    for run in runs:
        try:
            kept.append(retain_candidate(run, config, registry))
        except RedactionLeak as leak:
            attempt_done("stopped")
            kept.append(f"{run.contract.attempt_id}: {leak}")
    return kept


@step("grade-attempts")
def grade_attempts(retained: list[RetainedAttempt | str], config: Config, registry: Registry,
                   scratch: Path) -> list[str]:
    """Grade each retained attempt through the executable-grader boundary; return stop messages."""
    stopped = []
    for item in retained:
        if isinstance(item, str):
            stopped.append(item)
            continue
        result = grade_retained(item, config, registry, scratch)
        attempt_done("graded" if result.failure is None else "grader failure")
    return stopped

