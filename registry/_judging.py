"""Model-judge records (SPEC §6): governed policy, candidate truth, the blinded candidate. Pure, no Prefect.

A judge *is* its policy: id, version, adapter, provider, model, the rubric's
SHA-256 and the sampling parameters, hashed canonically. An edited rubric, a
new model or a different temperature is therefore a different judge by
construction, and every judgement names the policy hash it was made under.

Candidate truth binds, by digest, the redacted transcript and artifacts that
were judged. The blinded candidate -- the only candidate bytes a judge ever
receives -- carries that text, the scoring id and the truth's hash, and no
field that could name who produced the work.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from registry._canonical import canonical_json, digest, digest_json
from registry._config import JudgeConfig
from registry._models import Digest, Hex64, Strict


class SamplingParams(Strict):
    """Decoding settings that change what a judge answers (part of its identity)."""

    temperature: float
    seed: int | None


class JudgePolicy(Strict):
    """The governed identity of a model judge; its hash is the judge's name in every judgement."""

    schema_version: Literal["tribunal.judge_policy.v1"] = "tribunal.judge_policy.v1"
    judge_id: str
    version: str
    adapter: Literal["openai-chat", "command"]
    provider: str
    model: str
    rubric_sha256: Hex64
    sampling: SamplingParams


def judge_policy(config: JudgeConfig) -> JudgePolicy:
    """The policy a judge's configuration stands for."""
    return JudgePolicy(
        judge_id=config.judge_id, version=config.version, adapter=config.adapter, provider=config.provider,
        model=config.model, rubric_sha256=config.rubric_sha256,
        sampling=SamplingParams(temperature=config.temperature, seed=config.seed),
    )


def policy_hash(policy: JudgePolicy) -> str:
    """``judge_policy_hash``: the hash of the canonical policy."""
    return digest_json(policy.model_dump(mode="json"))


class CandidateTruth(Strict):
    """What was judged, bound by digest: the redacted transcript and each artifact."""

    schema_version: Literal["tribunal.candidate_truth.v1"] = "tribunal.candidate_truth.v1"
    scoring_id: Digest
    transcript_digest: Digest
    artifacts: dict[str, Digest]


class BlindedCandidate(Strict):
    """The candidate as a judge sees it: {schema, scoring_id, candidate_truth_hash, transcript, artifacts}."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_id: Literal["tribunal.blinded_candidate.v1"] = Field("tribunal.blinded_candidate.v1", alias="schema")
    scoring_id: Digest
    candidate_truth_hash: Digest
    transcript: str
    artifacts: dict[str, str]


def candidate_truth(scoring_id: str, transcript: bytes, artifacts: dict[str, bytes]) -> CandidateTruth:
    """Bind redacted text by digest (the same digests the registry stores it under)."""
    return CandidateTruth(scoring_id=scoring_id, transcript_digest=digest(transcript),
                          artifacts={name: digest(data) for name, data in artifacts.items()})


def blinded_candidate(truth: CandidateTruth, transcript: bytes, artifacts: dict[str, bytes]) -> bytes:
    """The canonical bytes of the blinded candidate; refuses text that does not match the truth."""
    if digest(transcript) != truth.transcript_digest or {n: digest(d) for n, d in artifacts.items()} != truth.artifacts:
        raise ValueError("blinded candidate text does not match its candidate truth")
    blinded = BlindedCandidate(
        scoring_id=truth.scoring_id, candidate_truth_hash=digest_json(truth.model_dump(mode="json")),
        transcript=transcript.decode("utf-8", errors="replace"),
        artifacts={name: data.decode("utf-8", errors="replace") for name, data in sorted(artifacts.items())},
    )
    return canonical_json(blinded.model_dump(mode="json", by_alias=True))
