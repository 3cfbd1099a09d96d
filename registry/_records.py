"""Schemas of stored records (SPEC §3). Each starts with its ``schema_version``.

Records are stored as their canonical JSON bytes; loaders return a valid
model or raise, never a half-valid dict. Later layers add their records here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from registry._models import Digest, Strict


class Role(StrEnum):
    """What a manifest entry's object is (SPEC §3, attempt artifacts and derived records)."""

    PLAN = "plan"
    ATTEMPT_CONTRACT = "attempt-contract"
    TRANSCRIPT = "transcript"
    PATCH = "patch"
    TERMINAL_EVIDENCE = "terminal-evidence"
    CANDIDATE_RESULT = "candidate-result"
    REDACTION_RECEIPT = "redaction-receipt"
    GRADER_INPUT = "grader-input"
    GRADER_OUTPUT = "grader-output"
    GRADER_RESULT = "grader-result"
    GRADER_RECEIPT = "grader-receipt"
    CANDIDATE_TRUTH = "candidate-truth"
    JUDGE_INTENT = "judge-intent"
    JUDGEMENT = "judgement"
    EVIDENCE_RECEIPT = "evidence-receipt"
    EXPERIMENT_RECORD = "experiment-record"
    MUTATION_RECEIPT = "mutation-receipt"
    REPORT = "report"


class GraderResult(Strict):
    """The normalized outcome of one grading: only ``passed`` decides."""

    schema_version: Literal["tribunal.grader_result.v1"] = "tribunal.grader_result.v1"
    attempt_id: Digest
    grader_id: str
    grader_version: str
    required: bool
    passed: bool
    evidence_hash: Digest


class GraderReceipt(Strict):
    """Seals one grading; ``integrity_hash`` is the hash of every other field."""

    schema_version: Literal["tribunal.grader_receipt.v1"] = "tribunal.grader_receipt.v1"
    attempt_id: Digest
    grader_profile: str
    grader_id: str
    grader_version: str
    required: bool
    passed: bool
    input_hash: Digest
    output_hash: Digest
    result_hash: Digest
    integrity_hash: Digest
