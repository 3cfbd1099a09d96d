"""Every planned attempt in every denominator (SPEC §13), whatever the mix of outcomes: a property test."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from registry import GraderResult
from tasks.denominators import tally
from tasks.report_formats import to_html, to_markdown
from tasks.verdict import terminal_class

CLASSES = ["resolved", "candidate_failure", "harness_invalid", "grader_failure", "judge_failure", None]
"""None: the attempt has no sealed verdict (unmeasured)."""


def _report(outcomes: dict[str, list[str | None]]) -> dict[str, Any]:
    attempts = [{"attempt_id": f"{name}-{i}", "case_id": f"c{i}", "candidate_id": name, "index": 0,
                 "terminal_class": verdict, "resolved": verdict == "resolved", "grader_id": "g", "grader_version": "1",
                 "generation": 1, "isolated": True, "failure_labels": []}
                for name, verdicts in outcomes.items() for i, verdict in enumerate(verdicts) if verdict is not None]
    unmeasured = [{"attempt_id": f"{name}-{i}", "case_id": f"c{i}", "candidate_id": name, "index": 0, "reason": "lost"}
                  for name, verdicts in outcomes.items() for i, verdict in enumerate(verdicts) if verdict is None]
    planned = Counter({name: len(verdicts) for name, verdicts in outcomes.items()})
    by_candidate = tally(planned, attempts, "candidate_id")
    return {"experiment": "x", "layer": "l", "graders": ["g@1"], "calibration": {}, "release_grade": True,
            "report_digest": "sha256:" + "0" * 64, "manifest_head": "1:x", "generated_at": "now", "attempts": attempts,
            "unmeasured": unmeasured, "cohorts": [],
            "summary": {"candidates": by_candidate, "taxonomy": {}}}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=12),
                       min_size=1))
def test_rates_agree_in_every_format_and_denominators_are_planned(outcomes: dict[str, list[str | None]]) -> None:
    """Attack: make failures vanish from a denominator; every format must show resolved / planned."""
    report = _report(outcomes)
    markdown, page = to_markdown(report), to_html(report, {})
    for name, verdicts in outcomes.items():
        entry = report["summary"]["candidates"][name]
        assert entry["planned"] == len(verdicts)
        assert entry["unmeasured"] == verdicts.count(None)
        assert sum(entry["classes"].values()) + entry["unmeasured"] == entry["planned"]
        assert entry["pass_rate"] == round(verdicts.count("resolved") / len(verdicts), 4)
        rate = f"{100 * entry['pass_rate']:.1f}%"
        assert f"| {name} | {entry['planned']} | {entry['resolved']} | {entry['unmeasured']} | {rate} |" in markdown
        assert (f"<td>{name}</td><td>{entry['planned']}</td><td>{entry['resolved']}</td>"
                f"<td>{entry['unmeasured']}</td><td>{rate}</td>") in page


def test_a_required_judge_that_never_answered_fails_closed() -> None:
    """Attack: an empty judge list read as "every judge passed"."""
    passed = GraderResult(attempt_id="sha256:" + "a" * 64, grader_id="g", grader_version="1", required=True,
                          passed=True, evidence_hash="sha256:" + "b" * 64)
    facts = {"harness_valid": True, "candidate_succeeded": True, "grader_results": [passed]}
    assert terminal_class(**facts, judge_required=True) == "judge_failure"
    assert terminal_class(**facts, judges_passed=[True], judge_required=True) == "resolved"
    assert terminal_class(**facts, judges_passed=[False]) == "judge_failure"
    assert terminal_class(**facts) == "resolved"
