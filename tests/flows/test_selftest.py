"""The release-gate positive control, as users run it (`tribunal selftest`)."""

from __future__ import annotations

import json

from tests.helpers import tribunal


def test_selftest_control_passes(cli_env: dict[str, str]) -> None:
    done = tribunal("selftest", "--json", env=cli_env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["control"] == "regrade:no-candidate-rerun" and result["passed"] is True
    assert result["invocations_before"] == result["invocations_after"] == result["attempts"] == 4
    assert result["regraded_results"] == 4 and result["attempts_with_one_regraded_result"] == 4
