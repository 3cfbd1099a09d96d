"""Receipt sealing and verification (SPEC §3, §5.6, §6). Pure functions, no Prefect.

A grader receipt's ``integrity_hash`` (an evidence receipt's ``checksum``) is
the hash of the canonical JSON of every other field, so flipping ``passed``
or relabelling the grader breaks the seal. Verification goes further than the seal: the referenced input,
output and result must read back from the registry, and the result must
agree with the receipt on attempt, verdict, grader id and version.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from registry import EvidenceReceipt, GraderReceipt, GraderResult, digest_json

UNSEALED = "sha256:" + "0" * 64


def _seal(model: type[BaseModel], schema: str, seal: str, fields: dict[str, Any]) -> Any:
    """Seal over the record as it will be stored (fields a record leaves out while unset are not hashed)."""
    body = {**fields, "schema_version": schema}
    body.pop(seal, None)
    draft = model.model_validate({**body, seal: UNSEALED})
    stored = draft.model_dump(mode="json")
    stored.pop(seal)
    return draft.model_copy(update={seal: digest_json(stored)})


def _holds(record: BaseModel, seal: str) -> bool:
    body = record.model_dump(mode="json")
    claimed = body.pop(seal)
    return bool(digest_json(body) == claimed)


def seal_receipt(fields: dict[str, Any]) -> GraderReceipt:
    """Return a grader receipt whose integrity hash covers ``fields``."""
    receipt: GraderReceipt = _seal(GraderReceipt, "tribunal.grader_receipt.v1", "integrity_hash", fields)
    return receipt


def receipt_seal_holds(receipt: GraderReceipt) -> bool:
    """Re-derive the integrity hash from the receipt's other fields."""
    return _holds(receipt, "integrity_hash")


def seal_evidence(fields: dict[str, Any]) -> EvidenceReceipt:
    """Return an evidence receipt whose checksum covers ``fields`` (identity, runtime, cost, tally, judgement)."""
    receipt: EvidenceReceipt = _seal(EvidenceReceipt, "tribunal.evidence_receipt.v1", "checksum", fields)
    return receipt


def evidence_seal_holds(receipt: EvidenceReceipt) -> bool:
    """Re-derive the evidence receipt's checksum from its other fields."""
    return _holds(receipt, "checksum")


def receipt_disagreements(receipt: GraderReceipt, result: GraderResult) -> list[str]:
    """Name every field on which the graded result contradicts its receipt."""
    pairs = [
        ("attempt", receipt.attempt_id, result.attempt_id),
        ("verdict", receipt.passed, result.passed),
        ("grader id", receipt.grader_id, result.grader_id),
        ("grader version", receipt.grader_version, result.grader_version),
    ]
    return [name for name, sealed, graded in pairs if sealed != graded]
