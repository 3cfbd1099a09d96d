"""The admitted slice (SPEC §14; seed 004, "uncontaminated evaluation slice"). Pure.

The plan declares its admission rule before any outcome exists (the rule is
part of the plan hash, and every attempt id binds that hash): a report can
only be computed over the slice that rule admits, never over one chosen
after seeing the results. Changing the rule means freezing a new plan, and
the report of each says the other exists (``sibling_rules``).

* ``all`` admits every case;
* ``cleared`` admits a case whose contamination decision is ``admit``
  (``reject`` and ``unknown`` are excluded: an unexamined case is not clear);
* ``validated`` admits a case whose validation record, made before any
  candidate ran on it, is ``valid``;
* ``cleared+validated`` needs both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry import Plan

CLEARED_RULES = ("cleared", "cleared+validated")
VALIDATED_RULES = ("validated", "cleared+validated")


def needs_validation(plan: Plan) -> bool:
    """Whether the plan's rule reads validation records (reports skip reading them otherwise)."""
    return plan.admit in VALIDATED_RULES


def slice_law(plan: Plan, standing: Mapping[str, str]) -> dict[str, Any]:
    """Which cases the plan's rule admits, and why each other case is excluded.

    ``standing`` maps a case id to ``valid`` or to why it is not (a validation
    status, ``no record``, ``record made after a candidate ran``); it is read
    only under a ``validated`` rule.
    """
    excluded = []
    for case in plan.cases:
        reasons = []
        if plan.admit in CLEARED_RULES and case.ledger.decision != "admit":
            reasons.append(f"contamination: decision {case.ledger.decision}")
        if plan.admit in VALIDATED_RULES and (status := standing.get(case.id, "no record")) != "valid":
            reasons.append(f"validation: {status}")
        if reasons:
            excluded.append({"case_id": case.id, "reason": "; ".join(reasons)})
    return {"rule": plan.admit, "admitted": len(plan.cases) - len(excluded), "total": len(plan.cases),
            "excluded": excluded}


def admitted_cases(plan: Plan, law: Mapping[str, Any]) -> set[str]:
    """The ids of the cases a slice law admits."""
    return {case.id for case in plan.cases} - {item["case_id"] for item in law["excluded"]}


def sibling_rules(plan: Plan, others: list[Plan]) -> list[dict[str, str]]:
    """Other plans of the same cases, candidate ids and attempts frozen under a different admission rule.

    Candidates are compared by id only: their pinned code may differ between
    freezes (a rebuilt agent) and the two reports still answer questions about
    the same cases under different slices.
    """
    def body(frozen: Plan) -> object:
        return (frozen.model_dump(mode="json", include={"experiment", "attempts", "cases"}),
                [candidate.id for candidate in frozen.candidates])

    return sorted(({"plan_hash": other.plan_hash, "rule": other.admit} for other in others
                   if other.admit != plan.admit and body(other) == body(plan)), key=lambda item: item["plan_hash"])


def describe_slice(law: Mapping[str, Any]) -> str:
    """One line: rule, admitted/total, each excluded case with its reason, and any sibling plan."""
    excluded = "; ".join(f"{item['case_id']} ({item['reason']})" for item in law["excluded"]) or "none"
    siblings = "".join(f"; the same experiment is also frozen under rule {item['rule']!r} as plan {item['plan_hash']}"
                       " (a different estimand)" for item in law.get("siblings", []))
    return (f"slice law: admit = {law['rule']!r}, {law['admitted']}/{law['total']} cases admitted; "
            f"excluded: {excluded}{siblings}")
