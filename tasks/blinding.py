"""What a model judge is sent (SPEC §6), built only from retained, redacted evidence. No Prefect.

The judge input is exactly three things: the judge's governed identity, the
scoring id, and the blinded candidate. The candidate side is read back from
the registry by the digests its candidate result records -- the transcript
and patch as stored, i.e. after redaction scrubbed secrets and the attempt's
own identity strings -- never from the run in memory or a caller's file.
"""

from __future__ import annotations

import json
from typing import Any

from registry import (
    CandidateResult,
    CandidateTruth,
    JudgePolicy,
    Registry,
    blinded_candidate,
    candidate_truth,
    canonical_json,
    policy_hash,
)


def retained_truth(registry: Registry, scoring_id: str, result: CandidateResult) -> tuple[CandidateTruth, bytes]:
    """The candidate truth of a retained attempt and its blinded candidate bytes."""
    transcript = registry.get(result.transcript_digest)
    artifacts = {"patch": registry.get(result.patch_digest)}
    truth = candidate_truth(scoring_id, transcript, artifacts)
    return truth, blinded_candidate(truth, transcript, artifacts)


def judge_input(policy: JudgePolicy, scoring_id: str, blinded: bytes) -> bytes:
    """Canonical bytes of {judge, scoring_id, candidate}: all a judge may know."""
    identity = {"judge_id": policy.judge_id, "version": policy.version, "model": policy.model,
                "judge_policy_hash": policy_hash(policy)}
    return canonical_json({"judge": identity, "scoring_id": scoring_id,
                           "candidate": json.loads(blinded)})


def chat_request(policy: JudgePolicy, rubric: str, scoring_id: str, blinded: bytes) -> bytes:
    """An OpenAI-compatible chat-completions body: the rubric as system message, the judge input as user message."""
    body: dict[str, Any] = {
        "model": policy.model,
        "temperature": policy.sampling.temperature,
        "messages": [{"role": "system", "content": rubric},
                     {"role": "user", "content": judge_input(policy, scoring_id, blinded).decode()}],
        "response_format": {"type": "json_object"},
    }
    if policy.sampling.seed is not None:
        body["seed"] = policy.sampling.seed
    return canonical_json(body)
