"""Prefect retries for real (SPEC §9, §15): a transient storage failure inside a flow run is retried by
Prefect, and the retried batch resumes from the manifest, so every attempt is still sealed exactly once."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from registry import NewEntry, Registry, Role, freeze_experiment
from tests.helpers import copy_demo


def test_a_transient_storage_failure_is_retried_and_every_attempt_is_sealed_once(
    tmp_path: Path, prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack on resume: a commit that fails once (an OSError, as a dropped S3 connection raises) mid-batch."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.evaluate import evaluate
    from flows.requests import EvaluateRequest

    spec = copy_demo(tmp_path / "exp")
    registry = str(tmp_path / "reg")
    plan = tmp_path / "plan.json"
    plan.write_bytes(freeze_experiment(spec, Registry.open(registry))[1])

    real_append = Registry.append
    failed: list[str] = []
    lock = threading.Lock()

    def append_failing_once(self: Registry, drafts: list[NewEntry]) -> Any:
        """The first grading commit (after that attempt's candidate evidence was retained) fails, once."""
        with lock:
            if not failed and any(d.role == Role.GRADER_RECEIPT.value for d in drafts):
                failed.append(drafts[0].attempt_id or "")
                raise OSError("connection reset by peer (injected)")
        return real_append(self, drafts)

    import tasks.attempts

    real_execute = tasks.attempts.execute_candidate
    executed: Counter[str] = Counter()

    def counted_execute(contract: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            executed[contract.attempt_id] += 1
        return real_execute(contract, *args, **kwargs)

    monkeypatch.setattr(Registry, "append", append_failing_once)
    monkeypatch.setattr(tasks.attempts, "execute_candidate", counted_execute)
    state = evaluate(EvaluateRequest(plan_path=str(plan), registry_url=registry,
                                     config_path=str(spec.parent / "tribunal.toml"), concurrency=1),
                     return_state=True)
    assert state.is_completed() and failed

    async def task_runs() -> list[Any]:
        async with get_client() as client:
            runs: list[Any] = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return runs

    runs = [run for run in asyncio.run(task_runs()) if run.name.startswith("evaluate-attempts")]
    assert sorted(run.run_count for run in runs)[-1] == 2 and all(run.state.is_completed() for run in runs)
    store = Registry.open(registry)
    for role in (Role.CANDIDATE_RESULT, Role.GRADER_RECEIPT, Role.GRADER_RESULT):
        per_attempt = Counter(e.attempt_id for e in store.entries(role=role))
        assert len(per_attempt) == 10 and set(per_attempt.values()) == {1}, role
    assert len(executed) == 10 and set(executed.values()) == {1}  # the retry graded retained evidence, ran nothing
    assert state.result().ran == 10 and state.result().resolved == 5
