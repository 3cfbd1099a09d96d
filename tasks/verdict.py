"""The verdict rule (SPEC §5.5). Pure: resolution is an intersection, never a rescue.

resolved <=> harness valid AND candidate succeeded AND every required grader
passed AND every judge passed.
An attempt redaction refused has no verdict inputs at all (nothing of it
was stored): its class is ``redaction_refused`` (SPEC §13), given by the
refusal record, never by this rule.
A run whose harness was invalid (the wrong model answered) is not a candidate
failure but an invalid measurement, so it is classified first; a failed
candidate keeps its failure whatever a grader says; and an empty set of
required graders fails closed -- "nothing checked it" is never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from registry import GraderResult

TerminalClass = Literal["resolved", "candidate_failure", "harness_invalid", "grader_failure", "judge_failure",
                        "redaction_refused"]
REDACTION_REFUSED: TerminalClass = "redaction_refused"


def terminal_class(
    *, harness_valid: bool, candidate_succeeded: bool, grader_results: Sequence[GraderResult],
    judges_passed: Sequence[bool] = (), judge_required: bool = False,
) -> TerminalClass:
    """Classify one attempt from the candidate side's facts and the graders' and judges' booleans.

    A case that names a judge and has no judgement fails closed, like an empty
    grader set: "nobody judged it" is never a pass.
    """
    if not harness_valid:
        return "harness_invalid"
    if not candidate_succeeded:
        return "candidate_failure"
    required = [result for result in grader_results if result.required]
    if not required or not all(result.passed for result in required):
        return "grader_failure"
    if not all(judges_passed) or (judge_required and not judges_passed):
        return "judge_failure"
    return "resolved"
