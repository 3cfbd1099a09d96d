"""Claim coordinates: what a reliability claim holds fixed (SPEC §14; seed 004, "evidence required"). Pure.

A pass rate means something only beside its estimand, task and evaluation
laws, each candidate's artifact revision, the inference protocol, the
evaluator versions, the sample rule and the failure policy. Each is written
out in every report; one that tribunal cannot know from the plan and the
stored evidence is printed as ``unknown`` -- never left out, because a
missing coordinate read as "held fixed" is how two incomparable numbers get
compared.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from registry import UNKNOWN, AttemptSummary, Plan, SandboxProfile
from tasks.measurement.admission import admitted_cases

COORDINATES = ("estimand", "task_law", "evaluation_law", "artifact_revision", "inference_protocol",
               "evaluator_version", "sample_rule", "failure_policy")
"""The order every rendering prints them in."""


def _short(value: str | None) -> str:
    return value[:19] + "…" if value else UNKNOWN


def _task_law(plan: Plan, admitted: set[str]) -> str:
    cases = []
    for case in plan.cases:
        if case.id in admitted:
            ledger = case.ledger
            cases.append(f"{case.id} (snapshot {case.snapshot_digest}, prompt {case.prompt_hash}, "
                         f"gold {case.gold_patch_digest or UNKNOWN}, contamination source={ledger.source} "
                         f"split={ledger.split} exposure={ledger.exposure} overlap={ledger.overlap} "
                         f"decision={ledger.decision})")
    return f"{len(cases)} admitted case(s): " + ("; ".join(cases) or "none")


def _profile_line(role: str, digests: set[str], profiles: Mapping[str, SandboxProfile]) -> str:
    if not digests:
        return f"{role} sandbox {UNKNOWN}"
    shown = []
    for found in sorted(digests):
        profile = profiles.get(found)
        shown.append(f"{profile.backend} {profile.version} ({_short(found)})" if profile else _short(found))
    return f"{role} sandbox " + ", ".join(shown)


def _evaluator_versions(plan: Plan, summaries: list[AttemptSummary]) -> dict[str, str]:
    """Per grader profile (and ``judge:NAME``): every id@version and pinned bytes behind the verdicts."""
    cases = {case.id: case for case in plan.cases}
    seen: dict[str, set[str]] = defaultdict(set)
    for summary in summaries:
        case = cases[summary.case_id]
        seen[case.grader_profile].add(f"{summary.grader_id}@{summary.grader_version} "
                                      f"{summary.grader_sha256 or 'sha256 ' + UNKNOWN}")
        for line in summary.judgements[-1:]:
            seen[f"judge:{case.judge}"].add(f"policy {line.judge_policy_hash}")
    names = sorted({case.grader_profile for case in plan.cases} | set(seen))
    return {name: ", ".join(sorted(seen[name])) or UNKNOWN for name in names}


def _inference_protocol(plan: Plan, by_candidate: Mapping[str, set[str]],
                        profiles: Mapping[str, SandboxProfile]) -> str:
    lines = []
    for candidate in plan.candidates:
        if candidate.kind == "predictions":
            run = f"replays predictions {candidate.predictions_digest or UNKNOWN}"
        else:
            pinned = ", ".join(f"{path} {found}" for path, found in sorted((candidate.read_only_digests or {}).items()))
            run = f"argv {candidate.command}; code {pinned or UNKNOWN}"
        used = [profiles[found] for found in sorted(by_candidate.get(candidate.id, ())) if found in profiles]
        env = sorted({name for profile in used for name in profile.env})
        cpu = sorted({profile.limits.cpu_s for profile in used if profile.limits})
        lines.append(f"{candidate.id}: {run}; provider {candidate.provider}, model {candidate.model}; "
                     f"env names {', '.join(env) if env else UNKNOWN}; network {candidate.network}; "
                     f"cpu limit {', '.join(f'{s} s' for s in cpu) if cpu else UNKNOWN}; "
                     f"wall-clock timeout {UNKNOWN} (operator config, not recorded with the evidence)")
    return "; ".join(lines)


def claim_coordinates(plan: Plan, law: Mapping[str, Any], layer: str, summaries: Iterable[AttemptSummary],
                      profiles: Mapping[str, SandboxProfile]) -> dict[str, Any]:
    """The eight coordinates of a report over ``law``'s admitted slice (``summaries``: its sealed verdicts)."""
    admitted = admitted_cases(plan, law)
    kept = [summary for summary in summaries if summary.case_id in admitted]
    candidate_profiles: dict[str, set[str]] = defaultdict(set)
    for summary in kept:
        if summary.candidate_sandbox:
            candidate_profiles[summary.candidate_id].add(summary.candidate_sandbox)
    graders = sorted({f"{s.grader_id}@{s.grader_version}" for s in kept})
    judges = sorted({case.judge for case in plan.cases if case.judge and case.id in admitted})
    sandboxes = [
        _profile_line("grader", {s.grader_sandbox for s in kept if s.grader_sandbox}, profiles),
        _profile_line("candidate", set().union(*candidate_profiles.values()), profiles),
    ]
    return {
        "estimand": (f"per candidate, the probability that one attempt is resolved, averaged over the admitted "
                     f"cases (slice rule {law['rule']!r}, {law['admitted']}/{law['total']} cases; layer {layer})"),
        "task_law": _task_law(plan, admitted),
        "evaluation_law": (f"grader profiles {', '.join(sorted({c.grader_profile for c in plan.cases}))} "
                           f"graded by {', '.join(graders) or UNKNOWN}; judges {', '.join(judges) or 'none'}; "
                           + "; ".join(sandboxes)),
        "artifact_revision": {c.id: c.revision or UNKNOWN for c in plan.candidates},
        "inference_protocol": _inference_protocol(plan, candidate_profiles, profiles),
        "evaluator_version": _evaluator_versions(plan, kept),
        "sample_rule": (f"{plan.attempts} attempt(s) per (case, candidate), every one planned in the frozen plan "
                        f"{plan.plan_hash}; order: case, then candidate, then index (attempts run concurrently, "
                        f"so completion order is unspecified); sampling seed {UNKNOWN}"),
        "failure_policy": ("every planned attempt of an admitted case is in the denominator; only resolved counts "
                           "as a pass; candidate_failure, harness_invalid, grader_failure, judge_failure, "
                           "redaction_refused and unmeasured attempts count as not resolved; a case leaves the "
                           f"denominator only through the slice rule {law['rule']!r}"),
    }


def describe_coordinates(coordinates: Mapping[str, Any]) -> list[str]:
    """One ``name: value`` line per coordinate, in order (dicts as ``key value`` pairs)."""
    lines = []
    for name in COORDINATES:
        value = coordinates.get(name, UNKNOWN)
        text = ", ".join(f"{key} {item}" for key, item in value.items()) if isinstance(value, dict) else str(value)
        lines.append(f"{name.replace('_', ' ')}: {text}")
    return lines
