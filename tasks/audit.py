"""Receipt audit for ``tribunal doctor`` (SPEC §8; seed 000 "Governance records").

For every attempt whose current state is resolved or grader_failure, the
newest grader receipt is re-verified like a stranger would: its integrity
hash re-derived; the input, output and result it names must be entries of
the same attempt in the manifest and read back as those bytes; and the
graded result must agree with the receipt on attempt, verdict, grader id and
version. A damaged record is a finding, never an exception.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from registry import (
    CandidateResult,
    Finding,
    GraderReceipt,
    GraderResult,
    ManifestEntry,
    ObjectCorrupt,
    ObjectMissing,
    Registry,
    Role,
    digest,
)
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


def audit_attempt(registry: Registry, entries: list[ManifestEntry]) -> list[Finding]:
    """Audit one attempt's newest receipt; ``entries`` are the attempt's entries in seq order."""
    newest = {entry.role: entry for entry in entries}
    receipt_entry, result_entry = newest.get(Role.GRADER_RECEIPT), newest.get(Role.GRADER_RESULT)
    candidate_entry = newest.get(Role.CANDIDATE_RESULT)
    if receipt_entry is None or result_entry is None or candidate_entry is None:
        return []
    raw = {role: _load(registry, entry) for role, entry in
           ((Role.GRADER_RECEIPT, receipt_entry), (Role.GRADER_RESULT, result_entry), (Role.CANDIDATE_RESULT, candidate_entry))}
    try:
        receipt = GraderReceipt.model_validate(json.loads(raw[Role.GRADER_RECEIPT] or b""))
        result = GraderResult.model_validate(json.loads(raw[Role.GRADER_RESULT] or b""))
        candidate = CandidateResult.model_validate(json.loads(raw[Role.CANDIDATE_RESULT] or b""))
    except (ValueError, ValidationError):
        return [_finding("receipt-unreadable", receipt_entry, "receipt, result or candidate result does not parse")]
    state = terminal_class(harness_valid=candidate.harness_valid, candidate_succeeded=candidate.succeeded,
                           grader_results=[result])
    if state not in AUDITED:
        return []
    findings = []
    if not receipt_seal_holds(receipt):
        findings.append(_finding("receipt-seal-broken", receipt_entry, "integrity hash does not cover the receipt's fields"))
    if receipt.attempt_id != receipt_entry.attempt_id:
        findings.append(_finding("receipt-misfiled", receipt_entry, "receipt names another attempt"))
    by_digest = {entry.digest: entry for entry in entries}
    for label, claimed in (("input", receipt.input_hash), ("output", receipt.output_hash), ("result", receipt.result_hash)):
        entry = by_digest.get(claimed)
        data = _load(registry, entry) if entry is not None else None
        if data is None or digest(data) != claimed:
            findings.append(_finding("receipt-artifact-missing", receipt_entry,
                                     f"grader {label} {claimed} is not in this attempt's manifest entries or does not read back"))
    if result_entry.digest != receipt.result_hash:
        findings.append(_finding("receipt-result-mismatch", result_entry, "newest grader result is not the one the receipt seals"))
    for field in receipt_disagreements(receipt, result):
        findings.append(_finding("receipt-result-disagrees", receipt_entry, f"result and receipt disagree on {field}"))
    return findings


def audit_receipts(registry: Registry) -> list[Finding]:
    """Audit the newest receipt of every attempt in the registry."""
    by_attempt: dict[str, list[ManifestEntry]] = {}
    for entry in registry.entries():
        if entry.attempt_id is not None:
            by_attempt.setdefault(entry.attempt_id, []).append(entry)
    findings: list[Finding] = []
    for entries in by_attempt.values():
        findings += audit_attempt(registry, entries)
    return findings
