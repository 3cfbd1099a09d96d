"""Receipt audit for ``tribunal doctor`` (SPEC §8; seed 000 "Governance records").

The current verdict of every attempt is rebuilt (last in sequence wins); for
each attempt that stands resolved or grader_failure, its receipt chain is
walked newest first and each receipt re-verified like a stranger would: its
integrity hash re-derived; the input, output and result it names must be
entries of the same attempt and read back as those bytes; the graded result
must agree with the receipt on attempt, verdict, grader id and version; and
generations must run 1, 2, 3...; the sandbox profiles the candidate result
and the receipt name must be stored (SPEC §11). A damaged record is a
finding, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import ValidationError

from registry import (
    AttemptContract,
    CandidateResult,
    DoctorReport,
    Finding,
    GraderReceipt,
    GraderResult,
    Judgement,
    ManifestCorrupt,
    ManifestEntry,
    ObjectCorrupt,
    ObjectMissing,
    Pin,
    Registry,
    Role,
    SandboxProfile,
    check_registry,
    digest,
)
from tasks.binding_audit import audit_grading_binding
from tasks.judge_audit import audit_judgements
from tasks.rederive import rederive_candidate, rederive_generations, rederive_receipt, rederive_records
from tasks.sealing import receipt_disagreements, receipt_seal_holds
from tasks.verdict import terminal_class

AUDITED = ("resolved", "grader_failure")


def _load(registry: Registry, entry: ManifestEntry) -> bytes | None:
    try:
        return registry.get(entry.digest)
    except (ObjectMissing, ObjectCorrupt):
        return None


def _finding(kind: str, entry: ManifestEntry, message: str) -> Finding:
    return Finding(kind=kind, seq=entry.seq, digest=entry.digest, message=f"attempt {entry.attempt_id}: {message}")


def _check_receipt(registry: Registry, receipt_entry: ManifestEntry, entries: list[ManifestEntry]) -> list[Finding]:
    """Verify one receipt: its seal, the artifacts it names, and the result it seals."""
    data = _load(registry, receipt_entry)
    try:
        receipt = GraderReceipt.model_validate(json.loads(data or b""))
    except (ValueError, ValidationError):
        return [_finding("receipt-unreadable", receipt_entry, "grader receipt does not parse")]
    findings = []
    if not receipt_seal_holds(receipt):
        findings.append(_finding("receipt-seal-broken", receipt_entry,
                                 "integrity hash does not cover the receipt's fields"))
    if receipt.attempt_id != receipt_entry.attempt_id:
        findings.append(_finding("receipt-misfiled", receipt_entry, "receipt names another attempt"))
    by_digest = {entry.digest: entry for entry in entries}
    named = (("input", receipt.input_hash), ("output", receipt.output_hash), ("result", receipt.result_hash))
    for label, claimed in named:
        entry = by_digest.get(claimed)
        blob = _load(registry, entry) if entry is not None else None
        if blob is None or digest(blob) != claimed:
            findings.append(_finding("receipt-artifact-missing", receipt_entry,
                                     f"grader {label} {claimed} is not in this attempt's manifest entries "
                                     "or does not read back"))
    if receipt.sandbox_profile is not None and not _profile_readable(registry, receipt.sandbox_profile):
        findings.append(_finding("sandbox-profile-missing", receipt_entry,
                                 f"sandbox profile {receipt.sandbox_profile} is not stored or does not parse"))
    result_entry = by_digest.get(receipt.result_hash)
    if result_entry is not None and (blob := _load(registry, result_entry)) is not None:
        try:
            result = GraderResult.model_validate(json.loads(blob))
        except (ValueError, ValidationError):
            return [*findings, _finding("receipt-unreadable", result_entry, "grader result does not parse")]
        for field in receipt_disagreements(receipt, result):
            findings.append(_finding("receipt-result-disagrees", receipt_entry,
                                     f"result and receipt disagree on {field}"))
    return findings


def _profile_readable(registry: Registry, profile_digest: str) -> bool:
    try:
        SandboxProfile.model_validate(json.loads(registry.get(profile_digest)))
    except (ObjectMissing, ObjectCorrupt, ValueError, ValidationError):
        return False
    return True


def sandbox_profiles(registry: Registry, entries: list[ManifestEntry]) -> list[str | None]:
    """The sandbox profile digests the newest candidate result and grader receipt name (None: unrecorded)."""
    newest = {entry.role: entry for entry in entries}
    named: list[str | None] = []
    for role, model in ((Role.CANDIDATE_RESULT, CandidateResult), (Role.GRADER_RECEIPT, GraderReceipt)):
        if role in newest:
            try:
                named.append(model.model_validate(json.loads(_load(registry, newest[role]) or b"")).sandbox_profile)
            except (ValueError, ValidationError):
                named.append(None)
    return named


def current_class(registry: Registry, entries: list[ManifestEntry]) -> str | None:
    """Rebuild the current verdict, last in sequence wins; None if it cannot be read."""
    newest = {entry.role: entry for entry in entries}
    try:
        contract = AttemptContract.model_validate(json.loads(_load(registry, newest[Role.ATTEMPT_CONTRACT]) or b""))
        candidate = CandidateResult.model_validate(json.loads(_load(registry, newest[Role.CANDIDATE_RESULT]) or b""))
        result = GraderResult.model_validate(json.loads(_load(registry, newest[Role.GRADER_RESULT]) or b""))
        judgement = (Judgement.model_validate(json.loads(_load(registry, newest[Role.JUDGEMENT]) or b""))
                     if Role.JUDGEMENT in newest else None)
    except (KeyError, ValueError, ValidationError):
        return None
    return terminal_class(harness_valid=candidate.harness_valid, candidate_succeeded=candidate.succeeded,
                          grader_results=[result], judges_passed=[judgement.passed] if judgement else [],
                          judge_required=contract.judge is not None)


def _unjudged(registry: Registry, entries: list[ManifestEntry]) -> list[Finding]:
    """A graded attempt whose case names a judge but that has no judgement: it must not stand as resolved."""
    newest = {entry.role: entry for entry in entries}
    if Role.JUDGEMENT in newest or Role.ATTEMPT_CONTRACT not in newest or Role.GRADER_RECEIPT not in newest:
        return []
    try:
        contract = AttemptContract.model_validate(json.loads(_load(registry, newest[Role.ATTEMPT_CONTRACT]) or b""))
    except (ValueError, ValidationError):
        return []
    if contract.judge is None:
        return []
    return [_finding("judgement-missing", newest[Role.GRADER_RECEIPT],
                     f"case {contract.case_id} names judge {contract.judge}, but the graded attempt has no judgement")]


def audit_attempt(registry: Registry, entries: list[ManifestEntry]) -> list[Finding]:
    """Audit one attempt (entries in seq order): every receipt generation, newest first."""
    receipts = [entry for entry in entries if entry.role == Role.GRADER_RECEIPT]
    if not receipts:
        return []
    unjudged = _unjudged(registry, entries)
    if unjudged:
        return unjudged
    state = current_class(registry, entries)
    if state is None:
        return [_finding("receipt-unreadable", receipts[-1], "current candidate or grader result does not parse")]
    if state not in AUDITED:
        return []
    findings = []
    generations = [entry.generation or 1 for entry in receipts]
    if generations != list(range(1, len(receipts) + 1)):
        findings.append(_finding("generation-gap", receipts[-1],
                                 f"receipt generations run {generations}, not 1..{len(receipts)}"))
    newest_result = next((e for e in reversed(entries) if e.role == Role.GRADER_RESULT), None)
    if newest_result is not None and (blob := _load(registry, receipts[-1])) is not None:
        try:
            if json.loads(blob).get("result_hash") != newest_result.digest:
                findings.append(_finding("receipt-result-mismatch", newest_result,
                                         "newest grader result is not the one the newest receipt seals"))
        except ValueError:
            pass
    for receipt_entry in reversed(receipts):
        findings += _check_receipt(registry, receipt_entry, entries)
    candidate_profile = sandbox_profiles(registry, entries)[0]
    if candidate_profile is not None and not _profile_readable(registry, candidate_profile):
        findings.append(_finding("sandbox-profile-missing", receipts[-1],
                                 f"candidate sandbox profile {candidate_profile} is not stored or does not parse"))
    return findings


def audit_receipts(registry: Registry, attempt_ids: list[str] | None = None) -> list[Finding]:
    """Audit every attempt's (or only ``attempt_ids``') grader receipts and judge records."""
    by_attempt: dict[str, list[ManifestEntry]] = {}
    for entry in registry.entries(attempt_ids=attempt_ids):
        if entry.attempt_id is not None:
            by_attempt.setdefault(entry.attempt_id, []).append(entry)
    findings: list[Finding] = []
    receipts: list[ManifestEntry] = []
    later: list[ManifestEntry] = []
    for entries in by_attempt.values():
        findings += audit_attempt(registry, entries) + audit_judgements(registry, entries)
        findings += audit_grading_binding(registry, entries) + rederive_candidate(registry, entries)
        receipts += [entry for entry in entries if entry.role == Role.GRADER_RECEIPT]
        later += [entry for entry in entries if entry.role in (Role.GRADER_RECEIPT, Role.JUDGEMENT)
                  and (entry.generation or 1) > 1]
    findings += rederive_generations(registry, later)
    pins: dict[str, tuple[str, int]] = {}
    for receipt in sorted(receipts, key=lambda entry: entry.seq):
        findings += rederive_receipt(registry, receipt, pins)
    if attempt_ids is None:
        findings += rederive_records(registry, registry.entries(role=Role.EXPERIMENT_RECORD), receipts)
    return findings


def audit_registry(registry: Registry, pins: Iterable[Pin] = (), attempt_ids: list[str] | None = None,
                   trust: list[bytes] | None = None) -> DoctorReport:
    """What ``tribunal doctor`` reports: the store's own checks (signatures against ``trust``, else the
    registry's anchor), then the receipts and judgements of every attempt (or of the attempts in
    ``attempt_ids``: a report's scope)."""
    report = check_registry(registry, pins, trust)
    try:
        receipts = audit_receipts(registry, attempt_ids)
    except ManifestCorrupt:
        receipts = []  # the chain findings already say why the manifest cannot be read
    return report.model_copy(update={"findings": report.findings + receipts})
