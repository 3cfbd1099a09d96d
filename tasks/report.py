"""Current verdicts, the experiment record, and reports (SPEC §5.6, §8, §10). No Prefect.

The current verdict of an attempt is the newest grader receipt in manifest
order (last in sequence wins); earlier generations stay addressable. Reports
and experiment records are stored like evidence: canonical bytes, a manifest
entry, and the manifest head they were computed at.
"""

from __future__ import annotations

from typing import Any

from registry import (
    AttemptSummary,
    ExperimentRecord,
    NewEntry,
    Plan,
    Registry,
    Role,
    canonical_json,
    digest_json,
)
from tasks.attempts import attempt_states, summarize

LAYER = "normalized-result.v1"


def head_label(registry: Registry) -> str | None:
    """The manifest head as ``seq:entry_hash`` (what doctor --pin takes)."""
    head = registry.head()
    return f"{head.seq}:{head.entry_hash}" if head else None


def current_summaries(registry: Registry, plan: Plan) -> dict[str, AttemptSummary]:
    """Return the current verdict of every sealed attempt of the plan."""
    states = attempt_states(registry, plan.experiment)
    return {
        ref.attempt_id: summarize(registry, states[ref.attempt_id])
        for ref in plan.attempt_refs()
        if ref.attempt_id in states and states[ref.attempt_id].sealed
    }


def _append_derived(registry: Registry, plan: Plan, role: Role, body: bytes, txn: str) -> str:
    object_digest = registry.put(body)
    registry.append([NewEntry(txn=txn, role=role.value, experiment_id=plan.experiment, digest=object_digest, size=len(body))])
    return object_digest


def seal_experiment_record(registry: Registry, plan: Plan) -> tuple[ExperimentRecord, str]:
    """Write the canonical experiment record for the current state; return it and its digest.

    Records with the same verdicts dedupe (their txn ignores the manifest head).
    """
    summaries = list(current_summaries(registry, plan).values())
    record = ExperimentRecord(
        experiment=plan.experiment, plan_hash=plan.plan_hash, attempts=summaries,
        resolved=sum(summary.resolved for summary in summaries), manifest_head=head_label(registry),
    )
    body = canonical_json(record.model_dump(mode="json"))
    record_id = digest_json(record.model_dump(mode="json", exclude={"manifest_head"}))
    record_digest = _append_derived(registry, plan, Role.EXPERIMENT_RECORD, body, f"record:{plan.plan_hash}:{record_id}")
    return record, record_digest


def build_report(registry: Registry, plan: Plan) -> dict[str, Any]:
    """Compute, store and return the report of the plan's current verdicts."""
    summaries = current_summaries(registry, plan)
    attempts = []
    per_candidate: dict[str, dict[str, Any]] = {c.id: {"attempts": 0, "graded": 0, "resolved": 0} for c in plan.candidates}
    for ref in plan.attempt_refs():
        summary = summaries.get(ref.attempt_id)
        tally = per_candidate[ref.candidate_id]
        tally["attempts"] += 1
        if summary is not None:
            tally["graded"] += 1
            tally["resolved"] += summary.resolved
        attempts.append(
            {
                "attempt_id": ref.attempt_id, "case_id": ref.case_id, "candidate_id": ref.candidate_id,
                "index": ref.index, "terminal_class": summary.terminal_class if summary else "pending",
                "resolved": bool(summary and summary.resolved),
                "grader_id": summary.grader_id if summary else None,
                "grader_version": summary.grader_version if summary else None,
                "generation": summary.generation if summary else None,
            }
        )
    for tally in per_candidate.values():
        tally["pass_rate"] = round(tally["resolved"] / tally["graded"], 4) if tally["graded"] else None
    body = {
        "schema_version": "tribunal.report.v1", "experiment": plan.experiment, "plan_hash": plan.plan_hash,
        "layer": LAYER, "manifest_head": head_label(registry), "attempts": attempts,
        "summary": {"candidates": per_candidate, "resolved": sum(t["resolved"] for t in per_candidate.values()),
                    "graded": sum(t["graded"] for t in per_candidate.values()), "attempts": len(attempts)},
    }
    data = canonical_json(body)
    report_digest = _append_derived(registry, plan, Role.REPORT, data, f"report:{digest_json(body)}")
    return {**body, "report_digest": report_digest}
