"""Receipt sealing and verification (SPEC §3, §5.6). Pure functions, no Prefect.

A grader receipt's ``integrity_hash`` is the hash of the canonical JSON of
every other field, so flipping ``passed`` or relabelling the grader breaks
the seal. Verification goes further than the seal: the referenced input,
output and result must read back from the registry, and the result must
agree with the receipt on attempt, verdict, grader id and version.
"""

from __future__ import annotations

from typing import Any

from registry import GraderReceipt, GraderResult, digest_json


def seal_receipt(fields: dict[str, Any]) -> GraderReceipt:
    """Return a receipt whose integrity hash covers ``fields``."""
    body = {**fields, "schema_version": "tribunal.grader_receipt.v1"}
    body.pop("integrity_hash", None)
    return GraderReceipt.model_validate({**body, "integrity_hash": digest_json(body)})


def receipt_seal_holds(receipt: GraderReceipt) -> bool:
    """Re-derive the integrity hash from the receipt's other fields."""
    body = receipt.model_dump(mode="json")
    claimed = body.pop("integrity_hash")
    return bool(digest_json(body) == claimed)


def receipt_disagreements(receipt: GraderReceipt, result: GraderResult) -> list[str]:
    """Name every field on which the graded result contradicts its receipt."""
    pairs = [
        ("attempt", receipt.attempt_id, result.attempt_id),
        ("verdict", receipt.passed, result.passed),
        ("grader id", receipt.grader_id, result.grader_id),
        ("grader version", receipt.grader_version, result.grader_version),
    ]
    return [name for name, sealed, graded in pairs if sealed != graded]
