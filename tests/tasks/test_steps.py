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
