"""Retaining a candidate run: redact, prove it, then store (SPEC §5.1-§5.2, §13).

The order is the guarantee: nothing of an attempt reaches the registry until
its transcript and patch were scrubbed and re-scanned. The six candidate-side
records are appended as one commit, so a crash leaves either all of them or
none -- which is what lets a rerun tell "half-done" (retained, not graded)
from "not started". A redaction stop stores only the attempt contract and a
refusal record (reason class and counts) in one commit, which makes the
attempt terminal rather than silently pending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from registry import (
    AttemptContract,
    CandidateResult,
    Config,
    ManifestEntry,
    NewEntry,
    RedactionReceipt,
    RedactionRefusal,
    Registry,
    Role,
    canonical_json,
)
from tasks.execution.candidate import CandidateRun
from tasks.redaction import (
    Patterns,
    RedactionStop,
    build_patterns,
    headers_problem,
    identity_problem,
    redact_artifacts,
    rescan,
    scrub,
)


@dataclass(frozen=True)
class RetainedAttempt:
    """The candidate-side evidence of one attempt as stored (redacted)."""

    contract: AttemptContract
    result: CandidateResult
    patch: bytes


def txn(attempt_id: str, step: str) -> str:
    """The idempotency key of one evaluate step of one attempt."""
    return f"evaluate:{attempt_id}:{step}"


def _scrub_strings(value: Any, patterns: Patterns) -> Any:
    if isinstance(value, str):
        return scrub(value, patterns)[0]
    if isinstance(value, list):
        return [_scrub_strings(item, patterns) for item in value]
    if isinstance(value, dict):
        return {key: _scrub_strings(item, patterns) for key, item in value.items()}
    return value


def retain_candidate(run: CandidateRun, config: Config, registry: Registry) -> RetainedAttempt:
    """Redact a run, store its evidence, append the candidate-side records; return the evidence as stored."""
    return stored_attempt(registry, run.contract, retain(run, config, registry))


def retain(run: CandidateRun, config: Config, registry: Registry) -> str:
    """Redact a run, store its evidence, and append the candidate-side records in one commit.

    Returns the digest of the candidate result the registry holds after the
    append (another writer's, if it retained the attempt first).
    """
    identity = run.identity_strings()
    patterns = build_patterns(config.redaction.patterns, identity)
    clean, tally = redact_artifacts({"transcript": run.transcript, "patch": run.patch}, patterns,
                                    config.redaction.allow_opaque_binary)
    invalid = identity_problem(identity, patterns) or headers_problem(run.patch, clean["patch"])
    # Terminal evidence exists to record who ran (observed identity, sessions), so
    # only secrets are scrubbed from it; the evidence receipt binds it, judges never see it.
    secrets = build_patterns(config.redaction.patterns, {})
    terminal_bytes = canonical_json(_scrub_strings(run.terminal.model_dump(mode="json"), secrets))
    rescan("terminal evidence", terminal_bytes.decode(), secrets)
    contract = run.contract
    attempt = contract.attempt_id
    receipt = RedactionReceipt(attempt_id=attempt, patterns_run=patterns.count, replacements=tally, clean=True)
    stored = {
        Role.ATTEMPT_CONTRACT: canonical_json(contract.model_dump(mode="json")),
        Role.TRANSCRIPT: clean["transcript"],
        Role.PATCH: clean["patch"],
        Role.TERMINAL_EVIDENCE: terminal_bytes,
        Role.REDACTION_RECEIPT: canonical_json(receipt.model_dump(mode="json")),
    }
    digests = {role: registry.put(data) for role, data in stored.items()}
    result = CandidateResult(
        sandbox_profile=registry.put(run.sandbox_profile) if run.sandbox_profile else None,
        attempt_id=attempt,
        succeeded=run.succeeded,
        harness_valid=run.harness_valid and invalid is None,
        reason="; ".join(r for r in (invalid, scrub(run.reason or "", patterns)[0]) if r) or None,
        transcript_digest=digests[Role.TRANSCRIPT],
        patch_digest=digests[Role.PATCH],
        terminal_evidence_digest=digests[Role.TERMINAL_EVIDENCE],
    )
    stored[Role.CANDIDATE_RESULT] = canonical_json(result.model_dump(mode="json"))
    digests[Role.CANDIDATE_RESULT] = registry.put(stored[Role.CANDIDATE_RESULT])
    entries = registry.append(
        [
            NewEntry(
                txn=txn(attempt, role.value), role=role.value, experiment_id=contract.experiment,
                attempt_id=attempt, digest=digests[role], size=len(stored[role]),
            )
            for role in stored
        ]
    )
    return entries[list(stored).index(Role.CANDIDATE_RESULT)].digest


def stored_attempt(registry: Registry, contract: AttemptContract, result_digest: str) -> RetainedAttempt:
    """The attempt as the registry holds it: the candidate result an append returned, and the patch it names.

    Another ``tribunal run`` on the same plan may have retained this attempt
    first; the append then returns the winner's entries, not ours, and grading
    must read those (SPEC §12 "Writers grade what is stored"), or the receipt
    would bind evidence that is not the retained one.
    """
    result = registry.load(result_digest, CandidateResult)
    return RetainedAttempt(contract=contract, result=result, patch=registry.get(result.patch_digest))


def refuse_attempt(contract: AttemptContract, stop: RedactionStop, try_number: int, registry: Registry) -> None:
    """Record a redaction stop durably, without content: the contract and a refusal record, one commit.

    The contract's txn is the one retention uses, so it is recorded once
    however many tries there are. Two runs refusing the same try at once write
    the same txn; the manifest keeps the first and returns it to the second.
    """
    attempt = contract.attempt_id
    refusal = RedactionRefusal(
        attempt_id=attempt, try_number=try_number, reason=stop.reason, artifact=stop.artifact,
        pattern=stop.pattern, matches=stop.matches, patterns_run=stop.patterns_run,
    )
    stored = {
        Role.ATTEMPT_CONTRACT: (txn(attempt, Role.ATTEMPT_CONTRACT.value),
                                canonical_json(contract.model_dump(mode="json"))),
        Role.REDACTION_REFUSAL: (txn(attempt, f"{Role.REDACTION_REFUSAL.value}:{try_number}"),
                                 canonical_json(refusal.model_dump(mode="json"))),
    }
    registry.append([
        NewEntry(txn=key, role=role.value, experiment_id=contract.experiment, attempt_id=attempt,
                 digest=registry.put(data), size=len(data))
        for role, (key, data) in stored.items()
    ])


RETAINED_ROLES = frozenset({Role.ATTEMPT_CONTRACT, Role.TRANSCRIPT, Role.PATCH, Role.TERMINAL_EVIDENCE,
                            Role.REDACTION_RECEIPT, Role.CANDIDATE_RESULT})
"""What retention writes, once per attempt: the first entry of each role is the attempt's evidence."""


def sealed_judgements(history: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    """An attempt's judgements that count: each appended in one commit with an evidence receipt (SPEC §6).

    The seal stage appends a judgement with the evidence receipt that seals
    it, and in a signed registry only the key can write that receipt; a
    judgement appended on its own (no key needed: judgements are bound
    through their receipts) must not change a verdict. Doctor checks that
    the receipt seals that very judgement (``judgement-unsealed``).
    """
    entries = list(history)
    counts = _counts(entries)
    return [entry for entry in entries if entry.role == Role.JUDGEMENT and counts(entry)]


def _counts(entries: list[ManifestEntry]) -> Callable[[ManifestEntry], bool]:
    """Whether an entry may count: any but a judgement without an evidence receipt in its commit."""
    sealing = {(entry.commit, entry.attempt_id) for entry in entries if entry.role == Role.EVIDENCE_RECEIPT}
    return lambda entry: entry.role != Role.JUDGEMENT or (entry.commit, entry.attempt_id) in sealing


def current_entries(history: Iterable[ManifestEntry]) -> dict[str, ManifestEntry]:
    """The entry of each role that counts: the first of the retained evidence, the newest of anything else
    (of judgements, the newest sealed one: ``sealed_judgements``).

    Retention appends its records once (a retry or a second run gets the
    stored entries back), so a later candidate result or patch can only be a
    writer's forgery: it must not change what a verdict rests on (doctor
    names it ``evidence-superseded``). Grader and judge records are
    superseded by design, by regrade and rejudge generations.
    """
    entries = list(history)
    counts = _counts(entries)
    current: dict[str, ManifestEntry] = {}
    for entry in filter(counts, entries):
        if entry.role not in RETAINED_ROLES or entry.role not in current:
            current[entry.role] = entry
    return current
