"""The evaluate flow as Prefect sees it: run name, state, progress and result artifacts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from registry import Registry, freeze_experiment
from tests.helpers import copy_demo


def test_flow_run_publishes_progress_and_results(tmp_path: Path, prefect_api: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from flows.evaluate import evaluate

    spec = copy_demo(tmp_path / "exp")
    registry = str(tmp_path / "reg")
    plan = tmp_path / "plan.json"
    plan.write_bytes(freeze_experiment(spec, Registry.open(registry))[1])
    state = evaluate(plan_path=str(plan), registry_url=registry, config_path=str(spec.parent / "tribunal.toml"),
                     concurrency=2, return_state=True)
    assert state.is_completed()
    summary = state.result()
    assert summary.ran == 10 and summary.resolved == 5

    async def read() -> tuple[list, list, str]:  # type: ignore[type-arg]
        run_id = state.state_details.flow_run_id
        mine = ArtifactFilterFlowRunId(any_=[run_id])
        async with get_client() as client:
            progress = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["evaluate-demo"]), flow_run_id=mine))
            table = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["results-demo"]), flow_run_id=mine))
            run = await client.read_flow_run(run_id)
            return progress, table, run.name

    progress, table, name = asyncio.run(read())
    assert name == "evaluate-demo"
    assert progress and float(progress[0].data) == 100.0
    rows = table[0].data if isinstance(table[0].data, list) else __import__("json").loads(table[0].data)
    assert {row["candidate"]: row["resolved"] for row in rows} == {
        "agent-fixer": 2, "agent-hasty": 0, "agent-crasher": 0, "agent-leaky": 2, "swe-preds": 1,
    }
