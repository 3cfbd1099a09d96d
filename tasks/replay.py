"""``tribunal doctor --replay``: run pinned graders again on retained inputs (SPEC §12; seed 004 replay contract).

Re-deriving a verdict from stored output proves the result follows from the
output; only running the grader again proves the output follows from the
input. For each chosen current verdict the grader's bytes (stored under
their sha256 when it graded, else the config's file if its bytes still match)
run on the retained grader input, on the case snapshot with the retained
patch, in the sandbox its receipt recorded, rebuilt here. The output digest
must be the recorded one; a profile with ``deterministic = false`` compares
only ``passed``. No Prefect here.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from registry import (
    Config,
    Finding,
    GraderInput,
    GraderProfile,
    GraderReceipt,
    ManifestEntry,
    ObjectCorrupt,
    ObjectMissing,
    Registry,
    Role,
    SandboxProfile,
    digest,
    resolve_key_file,
)
from tasks.execution.sandbox import Sandbox, SandboxUnavailable, ensure_private
from tasks.execution.workbench import Workbench, workbench
from tasks.grading import run_grader


@dataclass
class ReplaySummary:
    """How many verdicts were replayed and what came of it."""

    chosen: int = 0
    replayed: int = 0
    reproduced: int = 0
    unavailable: list[str] = field(default_factory=list)
    """Why a chosen verdict could not be replayed (no recorded grader bytes or profile): not a finding."""
    profile_drift: int = 0
    """Replays whose rebuilt sandbox differs from the recorded profile (another bwrap, other system paths)."""
    findings: list[Finding] = field(default_factory=list)

    def line(self) -> str:
        drift = f", {self.profile_drift} in a sandbox rebuilt with differences" if self.profile_drift else ""
        missing = f", {len(self.unavailable)} could not be replayed" if self.unavailable else ""
        return (f"replay: {self.replayed} of {self.chosen} verdicts replayed, {self.reproduced} reproduced"
                f"{missing}{drift}")


def current_receipts(registry: Registry) -> list[ManifestEntry]:
    """The newest grader receipt of every attempt, in manifest order."""
    newest: dict[str, ManifestEntry] = {}
    for entry in registry.entries(role=Role.GRADER_RECEIPT.value):
        if entry.attempt_id is not None:
            newest[entry.attempt_id] = entry
    return sorted(newest.values(), key=lambda entry: entry.seq)


def choose(receipts: list[ManifestEntry], count: int | None, seed: str) -> list[ManifestEntry]:
    """All of them, or ``count`` chosen at random with a seed a second reader can reuse (the manifest head)."""
    if count is None or count >= len(receipts):
        return receipts
    return sorted(random.Random(seed).sample(receipts, count), key=lambda entry: entry.seq)


def replay(registry: Registry, config: Config, count: int | None) -> ReplaySummary:
    head = registry.head()
    chosen = choose(current_receipts(registry), count, head.entry_hash if head else "")
    summary = ReplaySummary(chosen=len(chosen))
    with workbench(1, prefix="tribunal-replay-") as bench:
        for entry in chosen:
            _replay_one(registry, config, entry, bench, summary)
    return summary


def _grader_bytes(registry: Registry, sha256: str, profile: GraderProfile) -> bytes | None:
    try:
        return registry.get(f"sha256:{sha256}")
    except (ObjectMissing, ObjectCorrupt):
        pass
    try:
        data = Path(profile.path).read_bytes()
    except OSError:
        return None
    return data if digest(data) == f"sha256:{sha256}" else None


def _replay_one(registry: Registry, config: Config, entry: ManifestEntry, bench: Workbench,
                summary: ReplaySummary) -> None:
    where = f"attempt {entry.attempt_id} generation {entry.generation or 1}"
    try:
        receipt = registry.load(entry.digest, GraderReceipt)
        grader_input = registry.load(receipt.input_hash, GraderInput)
        recorded = registry.load(receipt.sandbox_profile, SandboxProfile) if receipt.sandbox_profile else None
    except (ObjectMissing, ObjectCorrupt, ValueError, ValidationError):
        summary.unavailable.append(f"{where}: its records do not read back (see the other findings)")
        return
    profile = config.grader_profiles.get(receipt.grader_profile)
    if receipt.grader_sha256 is None or recorded is None or profile is None:
        summary.unavailable.append(f"{where}: no recorded grader sha256 or sandbox profile, or no profile "
                                   f"{receipt.grader_profile} in the config to name the grader file")
        return
    program = _grader_bytes(registry, receipt.grader_sha256, profile)
    if program is None:
        summary.unavailable.append(f"{where}: grader bytes {receipt.grader_sha256} are neither stored nor the "
                                   "config's file")
        return
    sandbox = Sandbox.from_profile(recorded)
    try:  # a run refuses such walls before it starts; a profile recorded before that rule, or forged, may not
        ensure_private([sandbox], resolve_key_file(config.signing.key_file), registry.local_root)
    except SandboxUnavailable as error:
        summary.unavailable.append(f"{where}: not run again, {error}")
        return
    summary.profile_drift += sandbox.profile_digest != receipt.sandbox_profile
    with tempfile.TemporaryDirectory(dir=bench.scratch) as folder:
        grader = Path(folder) / Path(profile.path).name
        grader.write_bytes(program)
        pinned = profile.model_copy(update={"path": str(grader), "sha256": receipt.grader_sha256})
        contract = grader_input.contract
        output, passed, failure = run_grader(
            pinned, sandbox, registry.get(receipt.input_hash), contract.snapshot_digest,
            lambda: registry.get(contract.snapshot_digest), registry.get(grader_input.patch_digest), bench)
    summary.replayed += 1
    same = (passed and failure is None) == receipt.passed if not profile.deterministic \
        else digest(output) == receipt.output_hash
    if same:
        summary.reproduced += 1
        return
    expected = f"passed={str(receipt.passed).lower()}" if not profile.deterministic else receipt.output_hash
    got = f"passed={str(passed and failure is None).lower()}" if not profile.deterministic else digest(output)
    summary.findings.append(Finding(kind="replay-differs", seq=entry.seq, digest=entry.digest,
                                    message=f"{where}: the pinned grader, run again on the retained input, "
                                            f"gives {got}, the receipt recorded {expected}"))
