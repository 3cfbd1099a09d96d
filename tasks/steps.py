"""Prefect tasks of the evaluate flow: thin wrappers over the pure and I/O logic.

Granularity follows shared/notes/prefect.md: a task costs ~5 ms on the
client and ~40 ms of server CPU, so one task takes a *batch* of attempts
through every step (candidate, redaction and retention, grading), attempt
by attempt. Unredacted candidate output never leaves that task, and
``persist_result=False`` keeps Prefect from writing anything it returns.

Retries are for infrastructure only (storage or network I/O). A candidate that
fails or times out is evidence, and a redaction leak is a refusal: neither is
retried. A retried batch re-reads the manifest first, so attempts its first
try sealed or retained are not run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun
from prefect.runtime import task_run as current_task_run

from registry import AttemptContract, Config, Plan, Registry
from registry._errors import CommitOutcomeUnknown
from tasks.attempts import AttemptState, attempt_states, evaluate_attempt
from tasks.execution.workbench import Workbench

P = ParamSpec("P")
R = TypeVar("R")


def infrastructure_failure(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only when storage or the network failed, never for a verdict or a refusal."""
    try:
        state.result()
    except (OSError, CommitOutcomeUnknown):
        return True
    except BaseException:
        return False
    return False


# Typed like Prefect's own task(...) factory, so batch tasks keep their signatures under mypy strict.
def step(name: str) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The task decorator of batch tasks: no caching, no persisted results, infrastructure retries."""
    return task(name=name, cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1,
                retry_condition_fn=infrastructure_failure)


@step("evaluate-attempts")
def evaluate_attempts(contracts: list[AttemptContract], states: dict[str, AttemptState], plan: Plan,
                      config: Config, registry: Registry, bench: Workbench, retry_refused: bool = False) -> list[str]:
    """Take each attempt of a batch to sealed, in turn; return the messages of attempts that stopped.

    ``retry_refused`` gives each attempt refused before this run one new try;
    on a retried task run, an attempt this run already refused keeps its
    refusal (its refusal count grew since ``states`` was read).
    """
    before = {attempt: state.refusals for attempt, state in states.items()}
    if current_task_run.get_run_count() > 1:
        states = attempt_states(registry, plan.experiment)
    stopped = []
    for contract in contracts:
        state = states.get(contract.attempt_id)
        retry = retry_refused and state is not None and state.refusals == before.get(contract.attempt_id, 0)
        message = evaluate_attempt(contract, state, plan, config, registry, bench, retry)
        if message is not None:
            stopped.append(message)
    return stopped
