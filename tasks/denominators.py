"""Every planned attempt in every denominator (SPEC §13). Pure: no registry, no Prefect.

A pass rate is resolved / planned. An attempt without a sealed verdict --
never ran, not graded, graded but not judged, not graded by the pinned
grader version -- is *unmeasured*: it stays in the denominator, is counted
beside every rate and listed by attempt. Dropping it instead would let a
candidate choose which of its failures disappear (SWE-bench's lesson that
"never ran" must not count as anything but a miss).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tasks.verdict import REDACTION_REFUSED

if TYPE_CHECKING:
    from registry import AttemptRef


def planned_attempts(candidate_ids: list[str], refs: Iterable[AttemptRef]) -> Counter[str]:
    """The denominators: every planned attempt ``refs`` lists (the plan's admitted slice), by candidate.

    Every candidate of the plan is counted, at 0 when the slice admits no case at all.
    """
    planned = Counter(dict.fromkeys(candidate_ids, 0))
    planned.update(ref.candidate_id for ref in refs)
    return planned


def tally(planned: Counter[str], attempts: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """Per value of ``key`` (candidate or case): planned, resolved, each class, unmeasured, unisolated, pass rate."""
    tallies: dict[str, dict[str, Any]] = {
        name: {"planned": count, "attempts": 0, "resolved": 0, "unisolated": 0, "classes": Counter(), "graders": set()}
        for name, count in planned.items()
    }
    for item in attempts:
        entry = tallies[item[key]]
        entry["attempts"] += 1
        entry["resolved"] += item["resolved"]
        entry["classes"][item["terminal_class"]] += 1
        if item["terminal_class"] != REDACTION_REFUSED:  # no grader ran: nothing to isolate or to name
            entry["unisolated"] += not item["isolated"]
            entry["graders"].add(f"{item['grader_id']}@{item['grader_version']}")
    return {
        name: {**entry, "unmeasured": entry["planned"] - entry["attempts"],
               "classes": dict(sorted(entry["classes"].items())), "graders": sorted(entry["graders"]),
               "pass_rate": round(entry["resolved"] / entry["planned"], 4) if entry["planned"] else None}
        for name, entry in tallies.items()
    }
