"""Candidate execution (SPEC §5.1, §10 candidate protocol). No Prefect here.

A ``command`` candidate runs in a fresh checkout of the case with argv (no
shell), the prompt on stdin and in ``$TRIBUNAL_PROMPT_FILE``, and an
environment of exactly PATH, the configured pass-through variables, HOME (a
temp dir) and ``TRIBUNAL_*``. A ``predictions`` candidate's patch is applied
instead. Either way the outcome is evidence: a crash, a non-zero exit or a
timeout is a result, not an error. Everything returned here is still
unredacted and lives only in memory until ``retain`` scrubs it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from registry import AttemptContract, Config, ObservedIdentity, Plan, PlanCandidate, Registry, TerminalEvidence
from registry._predictions import parse_predictions
from tasks.execution.process import ProcessOutcome, run_program, utc_timestamp
from tasks.execution.workbench import Workbench
from tasks.execution.workspace import WorkspaceError, apply_patch, checkout, workspace_patch

TRANSCRIPT_CAP = 16 * 1024 * 1024


@dataclass(frozen=True)
class CandidateRun:
    """One candidate run, unredacted, in memory only."""

    contract: AttemptContract
    transcript: bytes
    patch: bytes
    terminal: TerminalEvidence
    succeeded: bool
    harness_valid: bool
    reason: str | None

    def identity_strings(self) -> dict[str, list[str]]:
        """Every string that names who produced this work (for redaction)."""
        observed = self.terminal.observed
        return {
            "candidate_id": [self.contract.candidate_id],
            "provider": [v for v in (self.contract.planned_provider, observed.provider) if v],
            "model": [v for v in (self.contract.planned_model, observed.model) if v],
            "session_id": list(self.terminal.session_ids),
            "cost": [] if self.terminal.cost_usd is None else [repr(self.terminal.cost_usd)],
        }


def _read_report(path: Path) -> tuple[ObservedIdentity, list[str], float | None, str | None]:
    """Read $TRIBUNAL_REPORT_FILE; a missing file is no claim, a malformed one invalidates the harness."""
    if not path.exists():
        return ObservedIdentity(), [], None, None
    try:
        report = json.loads(path.read_text())
        if not isinstance(report, dict):
            raise ValueError
        session = report.get("session_id")
        sessions = [str(s) for s in session] if isinstance(session, list) else ([str(session)] if session else [])
        cost = report.get("cost_usd")
        observed = ObservedIdentity(
            provider=str(report["provider"]) if report.get("provider") else None,
            model=str(report["model"]) if report.get("model") else None,
        )
        return observed, sessions, float(cost) if isinstance(cost, (int, float)) else None, None
    except (ValueError, UnicodeDecodeError):
        return ObservedIdentity(), [], None, "identity report unreadable"


def _identity_mismatch(contract: AttemptContract, observed: ObservedIdentity) -> str | None:
    for field, planned, seen in (
        ("provider", contract.planned_provider, observed.provider),
        ("model", contract.planned_model, observed.model),
    ):
        if seen is not None and seen != planned:
            return f"observed {field} differs from the plan"
    return None


def _terminal(contract: AttemptContract, outcome: ProcessOutcome, observed: ObservedIdentity,
              sessions: list[str], cost: float | None, reason: str | None) -> TerminalEvidence:
    status = "timeout" if outcome.timed_out else "completed" if outcome.completed else "failed"
    return TerminalEvidence(
        attempt_id=contract.attempt_id, status=status, exit_code=outcome.exit_code, started=outcome.started,
        ended=outcome.ended, duration_s=outcome.duration_s, observed=observed, session_ids=sessions,
        cost_usd=cost, reason=reason,
    )


def _candidate_env(config: Config, home: Path, prompt_file: Path, report_file: Path,
                   contract: AttemptContract) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    env.update({name: os.environ[name] for name in config.candidate_env.pass_ if name in os.environ})
    env.update(
        TRIBUNAL_PROMPT_FILE=str(prompt_file), TRIBUNAL_REPORT_FILE=str(report_file),
        TRIBUNAL_ATTEMPT_ID=contract.attempt_id,
    )
    return env


def execute_candidate(
    contract: AttemptContract,
    plan: Plan,
    candidate: PlanCandidate,
    config: Config,
    registry: Registry,
    bench: Workbench,
) -> CandidateRun:
    """Run one attempt's candidate in a fresh workspace and collect its evidence."""
    prompt = registry.get(contract.prompt_hash)
    with tempfile.TemporaryDirectory(prefix="attempt-", dir=bench.scratch) as tmp:
        root = Path(tmp)
        workspace, home = root / "workspace", root / "home"
        home.mkdir()
        baseline = checkout(contract.snapshot_digest, lambda: registry.get(contract.snapshot_digest), workspace, bench)
        if candidate.kind == "predictions":
            return _replay_prediction(contract, candidate, registry, workspace, baseline)
        prompt_file, report_file = root / "prompt.md", root / "report.json"
        prompt_file.write_bytes(prompt)
        argv = [part.replace("{experiment_dir}", plan.experiment_dir) for part in candidate.command or []]
        outcome = run_program(
            argv, cwd=workspace, env=_candidate_env(config, home, prompt_file, report_file, contract), stdin=prompt,
            timeout_s=config.candidate_timeout_s, max_output_bytes=TRANSCRIPT_CAP, merge_stderr=True, slot=bench.slots,
        )
        observed, sessions, cost, report_problem = _read_report(report_file)
        patch = workspace_patch(workspace, baseline)
    mismatch = report_problem or _identity_mismatch(contract, observed)
    reason = (
        f"could not start: {outcome.spawn_error}" if outcome.spawn_error
        else f"timed out after {config.candidate_timeout_s:g} s" if outcome.timed_out
        else f"exit code {outcome.exit_code}" if not outcome.completed else None
    )
    transcript = outcome.stdout + (b"\n[output truncated]\n" if outcome.stdout_overflow else b"")
    return CandidateRun(
        contract=contract, transcript=transcript, patch=patch,
        terminal=_terminal(contract, outcome, observed, sessions, cost, mismatch or reason),
        succeeded=outcome.completed, harness_valid=mismatch is None, reason=mismatch or reason,
    )


def _replay_prediction(
    contract: AttemptContract, candidate: PlanCandidate, registry: Registry, workspace: Path,
    baseline: dict[str, tuple[int, int, int]],
) -> CandidateRun:
    """Apply a SWE-bench prediction's patch instead of running a command."""
    started = utc_timestamp()
    predictions = parse_predictions(registry.get(candidate.predictions_digest or ""), f"predictions of {candidate.id}")
    prediction = predictions.get(contract.case_id)
    reason, patch, observed = None, b"", ObservedIdentity()
    if prediction is None:
        reason = "no prediction"
    else:
        observed = ObservedIdentity(model=prediction["model_name_or_path"] or None)
        try:
            apply_patch(workspace, prediction["model_patch"].encode())
            patch = workspace_patch(workspace, baseline)
        except WorkspaceError:
            reason = "prediction patch does not apply"
    mismatch = _identity_mismatch(contract, observed)
    outcome = ProcessOutcome(("predictions",), started, utc_timestamp(), 0.0, 0 if reason is None else 1, False,
                             b"", b"", 0)
    transcript = f"replayed prediction for {contract.case_id}: {reason or 'patch applied'}\n".encode()
    return CandidateRun(
        contract=contract, transcript=transcript, patch=patch,
        terminal=_terminal(contract, outcome, observed, [], None, mismatch or reason),
        succeeded=reason is None, harness_valid=mismatch is None, reason=mismatch or reason,
    )
