"""Signing benchmark: what signatures cost appends, and doctor over a large signed registry (SPEC §12).

* append N grader receipts, one commit each, to a signed registry and to an
  unsigned one in the same run (target: signed <= 1.2x unsigned);
* ``tribunal doctor --json`` (chain, objects, segments, signatures, receipts,
  judge records and every re-derivation) as a whole command over a signed
  registry of A attempts (target: <= 60 s and <= 1 GiB peak at A = 100,000).
  The registry is built through tribunal's own retention and grading-storage
  code (redaction, two signed commits per attempt, the experiment record);
  only the programs are skipped: each attempt's candidate "ran" and its
  grader "answered" ``{"passed": true}``.

usage: python benchmarks/signing_bench.py [--appends 10000] [--attempts 100000]
Results go to benchmarks/RESULTS.md (section "signing").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.pipeline_bench import make_experiment  # noqa: E402
from benchmarks.results import write_section  # noqa: E402
from registry import (  # noqa: E402
    NewEntry,
    ObservedIdentity,
    Registry,
    Role,
    Signer,
    TerminalEvidence,
    canonical_json,
    freeze_experiment,
    load_config,
    load_plan,
    write_private_key,
)

OUTPUT = b'{"passed": true}\n'


def signed_registry(url: str, key_file: Path) -> Registry:
    signer = Signer.generate()
    write_private_key(signer, key_file)
    Registry.open(url).add_signing_key(Signer.load(str(key_file)))
    return Registry.open(url, key_file=str(key_file))


def time_appends(registry: Registry, count: int) -> float:
    digest = registry.put(b"r" * 64)
    started = time.perf_counter()
    for i in range(count):
        registry.append([NewEntry(txn=f"bench-{i}", role=Role.GRADER_RECEIPT.value, experiment_id="bench",
                                  attempt_id="sha256:" + f"{i:064x}", digest=digest, size=64, generation=1)])
    return time.perf_counter() - started


def build(root: Path, url: str, key_file: Path, attempts: int) -> int:
    """A signed registry of ``attempts`` attempts, as retention and grading storage write them."""
    from tasks.attempts import grader_input_for, make_contract, stage_grading
    from tasks.execution.candidate import CandidateRun, candidate_sandbox
    from tasks.grading import grader_sandbox, sealed_grading
    from tasks.report import current_summaries, seal_experiment_record
    from tasks.retain import retain_candidate

    root.mkdir(parents=True)
    spec, config_path = make_experiment(root, attempts)
    registry = signed_registry(url, key_file)
    plan_path = root / "plan.json"
    plan_path.write_bytes(freeze_experiment(spec, registry)[1])
    plan, config = load_plan(plan_path), load_config(config_path)
    profile = config.grader_profiles["trivial"]
    grader, candidate = grader_sandbox(config, "trivial", profile), candidate_sandbox(config, plan, plan.candidates[0])
    program = (root / "grader.py").read_bytes()
    secret = registry.scoring_secret()
    for ref in plan.attempt_refs():
        contract = make_contract(plan, ref)
        terminal = TerminalEvidence(attempt_id=ref.attempt_id, status="completed", exit_code=0,
                                    started="2026-12-03T00:00:00Z", ended="2026-12-03T00:00:01Z", duration_s=1.0,
                                    observed=ObservedIdentity(provider="bench-labs", model="noop-1"), session_ids=[],
                                    cost_usd=None, nonce=os.urandom(16).hex())
        retained = retain_candidate(CandidateRun(contract=contract, transcript=b"done\n", patch=b"", terminal=terminal,
                                                 succeeded=True, harness_valid=True, reason=None,
                                                 sandbox_profile=candidate.profile_bytes), config, registry)
        grader_input = grader_input_for(retained, secret).model_copy(update={"grader_sha256": profile.sha256})
        input_bytes = canonical_json(grader_input.model_dump(mode="json"))
        grading = sealed_grading(attempt_id=ref.attempt_id, profile_name="trivial", grader_id="trivial", version="1",
                                 grader_sha256=profile.sha256, input_bytes=input_bytes, output=OUTPUT, passed=True,
                                 failure=None, sandbox=grader, program=program)
        registry.append(stage_grading(registry, contract, grading, generation=1, step="grading"))
    seal_experiment_record(registry, plan, current_summaries(registry, plan))
    return sum(1 for _ in plan.attempt_refs())


def time_doctor(url: str) -> tuple[float, float]:
    """(seconds, peak MiB) of one ``tribunal doctor --json`` process, which must find nothing."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    checked = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "doctor", "--registry",
                              url, "--json"], capture_output=True, text=True, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if checked.returncode != 0:
        raise SystemExit(f"doctor found something in the benchmark registry:\n{checked.stdout[-2000:]}"
                         f"{checked.stderr[-2000:]}")
    return elapsed, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=10_000)
    parser.add_argument("--attempts", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    root = Path(tempfile.mkdtemp(prefix="signing-bench-"))
    unsigned = time_appends(Registry.open(str(root / "unsigned")), args.appends)
    signed = time_appends(signed_registry(str(root / "signed"), root / "append-key.pem"), args.appends)
    ratio = signed / unsigned
    rows = [[f"append {args.appends:,} grader receipts, one commit each", f"{signed:.1f} s", f"{unsigned:.1f} s",
             f"{ratio:.2f}x", "-", "<= 1.2x", "pass" if ratio <= 1.2 else "FAIL"]]
    print(rows[-1], flush=True)
    started = time.perf_counter()
    durable = os.fsync
    os.fsync = lambda fd: None  # the build only: how the bytes got to disk does not change what doctor reads
    try:
        attempts = build(root / "experiment", str(root / "doctor"), root / "doctor-key.pem", args.attempts)
    finally:
        os.fsync = durable
    built = time.perf_counter() - started
    seconds, peak = time_doctor(str(root / "doctor"))
    verdict = "pass" if seconds <= 60 and peak <= 1024 else "FAIL"
    rows.append([f"`tribunal doctor` over {attempts:,} signed attempts", f"{seconds:.1f} s", "-", "-",
                 f"{peak:.0f} MiB", "<= 60 s, <= 1 GiB", verdict])
    print(rows[-1], flush=True)
    write_section(
        "signing", "Signing and doctor (`benchmarks/signing_bench.py`)",
        ["work", "signed", "unsigned", "ratio", "peak memory", "target", "result"], rows,
        notes=(
            "Appends: the same grader-receipt entry, one commit each, to an unsigned registry and to one with a "
            "trust anchor, where every append also stores one detached Ed25519 signature object and its entry. "
            f"Doctor: the whole `tribunal doctor --json` command (Python start-up included) over a registry built "
            f"(without fsync: it changes how bytes reach the disk, not what doctor reads) in {built:.0f} s "
            "through tribunal's own retention and grading storage (redaction, a signed commit of "
            "candidate records and one of grader records per attempt, the experiment record), programs skipped; "
            "doctor checks the chain, every object, every signature and re-derives every verdict. "
            f"Python {sys.version.split()[0]}, {os.cpu_count()} cores."
        ),
    )


if __name__ == "__main__":
    main()
