"""Prefect task policy: retry infrastructure failures only, never a verdict or a refusal."""

from __future__ import annotations

import pytest

from registry import CommitOutcomeUnknown, SpecError
from tasks.redaction import RedactionLeak


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (OSError("connection reset"), True),
        (CommitOutcomeUnknown("commit 3 could not be confirmed"), True),
        (RedactionLeak("pattern 'x' still matches"), False),
        (SpecError("bad config"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_infrastructure_errors_are_retried(error: Exception, retried: bool) -> None:
    from prefect.states import Failed

    from tasks.steps import infrastructure_failure

    assert infrastructure_failure(None, None, Failed(data=error)) is retried  # type: ignore[arg-type]


def _prefect_tasks() -> dict[str, object]:
    """Every Prefect task defined in tribunal's flows and tasks packages, by module and attribute name."""
    import importlib
    import pkgutil

    from prefect import Task

    import flows
    import tasks

    found: dict[str, object] = {}
    for package in (flows, tasks):
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(module_info.name)
            found.update({f"{module.__name__}.{name}": value for name, value in vars(module).items()
                          if isinstance(value, Task) and value.__module__ == module.__name__})
    return found


def test_every_retried_task_retries_only_infrastructure_failures() -> None:
    """Attack: a stage task retried on any exception reruns a candidate whose failure is evidence, or a refusal."""
    from prefect import Task

    from tasks.steps import infrastructure_failure

    found = _prefect_tasks()
    stages = {name: value for name, value in found.items() if name.startswith("tasks.steps.")}
    assert {value.name for value in stages.values() if isinstance(value, Task)} >= {
        "execute-candidates", "grade", "judge", "seal"}
    for name, value in found.items():
        assert isinstance(value, Task)
        if name in stages:  # the stages retry storage and network failures, and only those
            assert value.retries and value.retry_condition_fn is infrastructure_failure, name
        else:
            assert not value.retries or value.retry_condition_fn is infrastructure_failure, name
