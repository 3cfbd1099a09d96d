"""Redaction: secrets and identity never reach the registry or a grader (SPEC §5.2)."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from registry import (
    AttemptContract,
    CandidateResult,
    Config,
    ObservedIdentity,
    RedactionConfig,
    Registry,
    Role,
    TerminalEvidence,
    canonical_json,
)
from tasks.attempts import grader_input_for
from tasks.execution.candidate import CandidateRun
from tasks.redaction import RedactionLeak, build_patterns, redact_artifacts, scrub
from tasks.retain import RetainedAttempt, retain_candidate

SECRET = {"aws_access_key": "AKIA[0-9A-Z]{16}"}
AID = "sha256:" + "e" * 64


def test_identity_is_whole_word_and_case_insensitive() -> None:
    patterns = build_patterns({}, {"model": ["gpt-large"], "candidate_id": ["bot"]})
    text, counts = scrub("GPT-Large wrote gpt-large2 and gpt-large; bot ran", patterns)
    assert text == "[REDACTED] wrote gpt-large2 and [REDACTED]; bot ran"
    assert counts == {"identity:model": 2}


def test_short_identity_strings_are_not_used() -> None:
    patterns = build_patterns({}, {"candidate_id": ["a1", "abc"], "model": ["m-42x"]})
    assert [p.name for p in patterns] == ["identity:model"]


def test_a_surviving_match_stops_with_pattern_and_artifact_but_not_the_secret() -> None:
    """Attack: an incomplete scrub must be a hard stop, and its message must not leak the secret."""
    patterns = build_patterns({"greedy": r"\[REDACTED\]|hunter2"}, {})
    with pytest.raises(RedactionLeak) as caught:
        redact_artifacts({"transcript": b"password hunter2"}, patterns)
    message = str(caught.value)
    assert "'greedy'" in message and "transcript" in message and "hunter2" not in message


def test_binary_bytes_round_trip_where_nothing_matched() -> None:
    data = bytes(range(256)) * 4
    clean, tally = redact_artifacts({"patch": data}, build_patterns(SECRET, {}))
    assert clean["patch"] == data and tally == {}


def make_run(transcript: str, patch: str, provider: str, model: str, candidate: str, session: str,
             cost: float = 0.5) -> CandidateRun:
    contract = AttemptContract(
        attempt_id=AID, plan_hash="sha256:" + "1" * 64, experiment="exp", case_id="case", candidate_id=candidate,
        index=0, snapshot_digest="sha256:" + "2" * 64, prompt_hash="sha256:" + "3" * 64, grader_profile="p",
        judge=None, candidate_kind="command", planned_provider=provider, planned_model=model,
    )
    terminal = TerminalEvidence(
        attempt_id=AID, status="completed", exit_code=0, started="t0", ended="t1", duration_s=0.1,
        observed=ObservedIdentity(provider=provider, model=model), session_ids=[session], cost_usd=cost,
    )
    return CandidateRun(contract=contract, transcript=transcript.encode(), patch=patch.encode(), terminal=terminal,
                        succeeded=True, harness_valid=True, reason=None)


def whole_word(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])", re.IGNORECASE)


def retained_skeleton() -> RetainedAttempt:
    run = make_run("", "", "p", "m", "c", "s")
    digest0 = "sha256:" + "0" * 64
    result = CandidateResult(attempt_id=AID, succeeded=True, harness_valid=True, reason=None,
                             transcript_digest=digest0, patch_digest=digest0, terminal_evidence_digest=digest0)
    return RetainedAttempt(contract=run.contract, result=result, patch=b"")


identity = st.text(alphabet=string.ascii_letters + string.digits + "-._", min_size=4, max_size=16).filter(
    lambda s: s[0].isalnum() and s[-1].isalnum() and "redacted" not in s.lower()
)
filler = st.text(alphabet=string.ascii_letters + " \n.,:;()", max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(provider=identity, model=identity, candidate=identity, session=identity,
       parts=st.lists(filler, min_size=6, max_size=6),
       key=st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16))
def test_no_identity_or_secret_reaches_storage_or_grader_input(
    tmp_path: Path, provider: str, model: str, candidate: str, session: str, parts: list[str], key: str
) -> None:
    """Attack: a candidate that writes its own name, provider, session and a secret into its work."""
    forbidden = [provider, model, candidate, session]
    # The fixed vocabulary of the grader-input document (keys, `true`, `case`) is not a leak.
    skeleton = canonical_json(grader_input_for(retained_skeleton(), b"k" * 32).model_dump(mode="json")).decode()
    assume(not any(whole_word(value).search(skeleton) for value in forbidden))
    secret = f"AKIA{key}"
    transcript = f"{parts[0]}{model}{parts[1]} {provider} {parts[2]}{candidate.upper()} {session}{parts[3]} {secret}"
    patch = f"+# by {candidate} using {model.lower()} via {provider} ({session}) key={secret}\n{parts[4]}"
    registry = Registry.open(str(tmp_path / f"reg-{abs(hash((provider, model, candidate, session, key)))}"))
    config = Config(redaction=RedactionConfig(patterns=SECRET))
    retained = retain_candidate(make_run(transcript, patch, provider, model, candidate, session), config, registry)
    stored = [registry.get(e.digest) for e in registry.entries() if e.role in (Role.TRANSCRIPT, Role.PATCH)]
    grader_bytes = canonical_json(grader_input_for(retained, b"k" * 32).model_dump(mode="json"))
    for blob in [*stored, grader_bytes]:
        text = blob.decode("utf-8", errors="replace")
        assert not re.search(SECRET["aws_access_key"], text)
        for value in forbidden:
            assert not whole_word(value).search(text), value
    receipt = json.loads(registry.get(registry.entries(role=Role.REDACTION_RECEIPT)[0].digest))
    assert receipt["clean"] is True and receipt["patterns_run"] >= 2 and sum(receipt["replacements"].values()) >= 6


def test_unredacted_bytes_are_never_written_when_a_leak_stops_the_attempt(tmp_path: Path) -> None:
    """Attack: a stopped attempt must not leave its raw transcript behind in the store."""
    registry = Registry.open(str(tmp_path / "reg"))
    config = Config(redaction=RedactionConfig(patterns={"greedy": r"\[REDACTED\]|hunter2"}))
    with pytest.raises(RedactionLeak):
        retain_candidate(make_run("hunter2 hunter2", "", "prov", "model-x", "cand", "sess-1"), config, registry)
    assert list(registry.objects.digests()) == [] and registry.entries() == []
