"""Current verdicts, the experiment record, reports and their comparison (SPEC §5.6, §8, §10). No Prefect.

The current verdict of an attempt is its newest grader receipt in manifest
order (last in sequence wins); earlier generations stay addressable. A report
pinned to a grader version admits only attempts that version graded, reading
that version's newest receipt, so it never mixes in another version. Every
report is stored like evidence -- canonical bytes and a ``report`` manifest
entry -- and carries the manifest head it was computed at; comparisons read
two stored reports back by digest.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from registry import (
    AttemptRef,
    AttemptSummary,
    ExperimentRecord,
    NewEntry,
    Plan,
    Registry,
    Role,
    TribunalError,
    canonical_json,
    digest_json,
    is_digest,
    release_free_memory,
)
from tasks.attempts import attempt_states, refused_attempts, summarize
from tasks.gates import calibration_status, judge_key
from tasks.taxonomy import count_primary
from tasks.verdict import REDACTION_REFUSED

LAYER = "normalized-result.v1"
SUMMARY_CHUNK = 100


class ReportNotFound(TribunalError):
    """A digest given to --compare does not name a stored report."""


def head_label(registry: Registry) -> str | None:
    """The manifest head as ``seq:entry_hash`` (what doctor --pin takes)."""
    head = registry.head()
    return f"{head.seq}:{head.entry_hash}" if head else None


def current_summaries(registry: Registry, plan: Plan, grader_version: str | None = None) -> dict[str, AttemptSummary]:
    """Each graded attempt's verdict: newest receipt overall, or newest of ``grader_version``.

    Attempts are read SUMMARY_CHUNK at a time, so only one chunk's manifest
    entries are held at once, however large the experiment.
    """
    refs = list(plan.attempt_refs())
    found = {}
    for start in range(0, len(refs), SUMMARY_CHUNK):
        chunk = refs[start : start + SUMMARY_CHUNK]
        states = attempt_states(registry, plan.experiment, [ref.attempt_id for ref in chunk])
        for ref in chunk:
            state = states.get(ref.attempt_id)
            receipts = state.receipts(grader_version) if state else []
            if state is not None and receipts:
                found[ref.attempt_id] = summarize(registry, ref, state, receipts[-1])
        release_free_memory()
    return found


def _append_derived(registry: Registry, plan: Plan, role: Role, body: bytes, txn: str) -> str:
    """Store a derived record once: an existing txn means an equivalent record is already there."""
    existing = registry.find(txn)
    if existing is not None:
        return existing.digest
    object_digest = registry.put(body)
    registry.append([NewEntry(txn=txn, role=role.value, experiment_id=plan.experiment, digest=object_digest,
                              size=len(body))])
    return object_digest


def seal_experiment_record(registry: Registry, plan: Plan,
                           summaries: dict[str, AttemptSummary]) -> tuple[ExperimentRecord, str]:
    """Write the canonical experiment record of the current verdicts; return it and its digest.

    Records with the same verdicts dedupe (their txn ignores the manifest head).
    """
    record = ExperimentRecord(
        experiment=plan.experiment, plan_hash=plan.plan_hash, attempts=list(summaries.values()),
        resolved=sum(summary.resolved for summary in summaries.values()), manifest_head=head_label(registry),
    )
    body = canonical_json(record.model_dump(mode="json"))
    record_id = digest_json(record.model_dump(mode="json", exclude={"manifest_head"}))
    record_digest = _append_derived(registry, plan, Role.EXPERIMENT_RECORD, body,
                                    f"record:{plan.plan_hash}:{record_id}")
    return record, record_digest


def cohort_key(case_id: str, snapshot: str, prompt: str, layer: str) -> str:
    """Attempts are comparable only inside one cohort: same case bytes, prompt and grading layer."""
    return digest_json([case_id, snapshot, prompt, layer])


def _rates(attempts: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    tallies: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"attempts": 0, "resolved": 0, "unisolated": 0, "graders": set()})
    for item in attempts:
        tally = tallies[item[key]]
        tally["attempts"] += 1
        tally["resolved"] += item["resolved"]
        if item["terminal_class"] != REDACTION_REFUSED:  # no grader ran, nothing to isolate
            tally["unisolated"] += not item["isolated"]
            tally["graders"].add(f"{item['grader_id']}@{item['grader_version']}")
    return {
        name: {**t, "graders": sorted(t["graders"]), "pass_rate": round(t["resolved"] / t["attempts"], 4)}
        for name, t in tallies.items()
    }


def build_report(registry: Registry, plan: Plan, grader_version: str | None = None,
                 summaries: dict[str, AttemptSummary] | None = None) -> dict[str, Any]:
    """Compute, store and return the report of the plan's current verdicts (or one grader version's).

    ``summaries`` saves re-reading the verdicts a flow has just sealed into its record.
    """
    layer = LAYER if grader_version is None else f"{LAYER}@grader-version:{grader_version}"
    if summaries is None:
        summaries = current_summaries(registry, plan, grader_version)
    cases = {case.id: case for case in plan.cases}
    refused = refused_attempts(registry, plan)
    attempts: list[dict[str, Any]] = []
    pending = 0
    for ref in plan.attempt_refs():
        summary = summaries.get(ref.attempt_id)
        case = cases[ref.case_id]
        if summary is None and ref.attempt_id in refused:
            attempts.append(_refused_line(ref, refused[ref.attempt_id],
                                          cohort_key(case.id, case.snapshot_digest, case.prompt_hash, layer)))
            continue
        if summary is None:
            pending += 1
            continue
        attempts.append({
            "attempt_id": ref.attempt_id, "case_id": ref.case_id, "candidate_id": ref.candidate_id,
            "index": ref.index, "terminal_class": summary.terminal_class, "resolved": summary.resolved,
            "grader_id": summary.grader_id, "grader_version": summary.grader_version,
            "generation": summary.generation, "receipt": summary.receipt_digest,
            "failure_labels": summary.failure_labels, "isolated": bool(summary.isolated),
            "cohort_key": cohort_key(case.id, case.snapshot_digest, case.prompt_hash, layer),
            **({"judge": summary.judgements[-1].model_dump(mode="json"),
                "judgements": [line.model_dump(mode="json") for line in summary.judgements]}
               if summary.judgements else {}),
        })
    cohorts = [
        {"case_id": case_id, "cohort_key": attempts_of[0]["cohort_key"], **_rates(attempts_of, "case_id")[case_id]}
        for case_id, attempts_of in _group(attempts, "case_id").items()
    ]
    by_candidate = _rates(attempts, "candidate_id")
    graders = sorted({f"{a['grader_id']}@{a['grader_version']}" for a in attempts
                      if a["terminal_class"] != REDACTION_REFUSED})
    policies: dict[str, set[str]] = defaultdict(set)
    for a in attempts:
        if "judge" in a:
            policies[a["candidate_id"]].add(a["judge"]["judge_policy_hash"])
    calibration = calibration_status(registry, graders, sorted(set().union(*policies.values())))
    for name, tally in by_candidate.items():
        behind = [*tally["graders"], *map(judge_key, policies.get(name, ()))]
        tally["calibrated"] = all(calibration[subject]["status"] == "passed" for subject in behind)
    body = {
        "schema_version": "tribunal.report.v1", "experiment": plan.experiment, "plan_hash": plan.plan_hash,
        "layer": layer, "grader_version": grader_version, "manifest_head": head_label(registry),
        "graders": graders, "calibration": calibration,
        "release_grade": bool(graders) and all(entry["status"] == "passed" for entry in calibration.values()),
        "attempts": attempts, "cohorts": cohorts,
        "summary": {"candidates": {c.id: by_candidate.get(c.id) for c in plan.candidates},
                    "attempts": len(attempts), "resolved": sum(a["resolved"] for a in attempts),
                    "unisolated": sum(not a["isolated"] for a in attempts
                                      if a["terminal_class"] != REDACTION_REFUSED),
                    "redaction_refused": len(refused),
                    "not_graded": pending,
                    "taxonomy": count_primary([a["failure_labels"] for a in attempts] + [["M"]] * pending)},
    }
    report_digest = _append_derived(registry, plan, Role.REPORT, canonical_json(body), f"report:{digest_json(body)}")
    return {**body, "report_digest": report_digest}


def _refused_line(ref: AttemptRef, reason: str, cohort: str) -> dict[str, Any]:
    """A refused attempt as a report lists it: counted, unresolved, unmeasured (taxonomy M), never graded."""
    return {
        "attempt_id": ref.attempt_id, "case_id": ref.case_id, "candidate_id": ref.candidate_id, "index": ref.index,
        "terminal_class": REDACTION_REFUSED, "resolved": False, "refusal": reason, "grader_id": "none",
        "grader_version": "unavailable", "generation": 0, "receipt": None, "failure_labels": ["M"],
        "isolated": False, "cohort_key": cohort,
    }


def rates_by_grader_version(registry: Registry, plan: Plan) -> dict[str, dict[str, float]]:
    """Pass rate per candidate under each grader version that graded the experiment (for charts)."""
    versions = sorted({e.grader_version
                       for e in registry.entries(experiment_id=plan.experiment, role=Role.GRADER_RECEIPT)
                       if e.grader_version is not None})
    series: dict[str, dict[str, float]] = defaultdict(dict)
    for version in versions:
        summaries = list(current_summaries(registry, plan, version).values())
        for candidate, tally in _rates([s.model_dump() for s in summaries], "candidate_id").items():
            series[candidate][" + ".join(tally["graders"])] = tally["pass_rate"]
    return dict(series)


def _group(items: list[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        groups[item[key]].append(item)
    return dict(groups)


def load_report(registry: Registry, report_digest: str) -> dict[str, Any]:
    """Read a stored report back by digest; only digests of ``report`` entries qualify."""
    if not is_digest(report_digest) or report_digest not in {e.digest for e in registry.entries(role=Role.REPORT)}:
        raise ReportNotFound(f"{report_digest!r} is not a stored report in this registry (see `tribunal report`)")
    body: dict[str, Any] = json.loads(registry.get(report_digest))
    return {**body, "report_digest": report_digest}


def compare_reports(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Verdict flips between two reports and the pass-rate change per candidate."""
    old = {a["attempt_id"]: a for a in before["attempts"]}
    flips = [
        {"attempt_id": a["attempt_id"], "case_id": a["case_id"], "candidate_id": a["candidate_id"], "index": a["index"],
         "before": old[a["attempt_id"]]["terminal_class"], "after": a["terminal_class"],
         "grader_before": f"{old[a['attempt_id']]['grader_id']}@{old[a['attempt_id']]['grader_version']}",
         "grader_after": f"{a['grader_id']}@{a['grader_version']}"}
        for a in after["attempts"]
        if a["attempt_id"] in old and old[a["attempt_id"]]["resolved"] != a["resolved"]
    ]
    rates = {}
    for name in sorted(set(before["summary"]["candidates"]) | set(after["summary"]["candidates"])):
        was, now = before["summary"]["candidates"].get(name), after["summary"]["candidates"].get(name)
        was_rate, now_rate = (was or {}).get("pass_rate"), (now or {}).get("pass_rate")
        change = round(now_rate - was_rate, 4) if was_rate is not None and now_rate is not None else None
        rates[name] = {"before": was_rate, "after": now_rate, "change": change,
                       "graders_before": (was or {}).get("graders", []),
                       "graders_after": (now or {}).get("graders", [])}
    return {"before": before["report_digest"], "after": after["report_digest"], "flips": flips, "pass_rates": rates}
