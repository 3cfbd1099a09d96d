"""A forger without the key appends candidate evidence or junk receipts to a signed registry (red team).

Each attack works on its own copy of one signed demo run; the forger writes
with tribunal's own ``registry`` package, as anyone who can write the store can.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from registry import NewEntry, Registry, Role, canonical_json
from registry._entry import entry_hash, rows_to_table
from registry._layout import commit_key
from registry._manifest import encode_table
from tests.flows.test_signing_e2e import doctor, signed_demo
from tests.helpers import tribunal


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> dict[str, Any]:
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    root = tmp_path_factory.mktemp("forged-evidence")
    registry, plan, config, public = signed_demo(root, env)
    return {"registry": Path(registry), "plan": plan, "config": config, "public": public, "env": env}


def copy_of(signed: dict[str, Any], tmp_path: Path) -> Registry:
    shutil.copytree(signed["registry"], tmp_path / "reg")
    return Registry.open(str(tmp_path / "reg"))


def report(signed: dict[str, Any], store: Registry) -> Any:
    return tribunal("report", "--plan", str(signed["plan"]), "--registry", store.url, "--config",
                    str(signed["config"]), "--format", "json", env=signed["env"])


def resolved_attempt(store: Registry, signed: dict[str, Any]) -> str:
    built = json.loads(report(signed, store).stdout)
    return str(next(a["attempt_id"] for a in built["attempts"] if a["resolved"]))


def append_candidate_result(store: Registry, attempt: str, **changes: Any) -> int:
    """A second candidate result for the attempt (same evidence, other claims), appended unsigned."""
    entry = store.entries(attempt_id=attempt, role=Role.CANDIDATE_RESULT)[0]
    body = canonical_json({**json.loads(store.get(entry.digest)), **changes})
    [landed] = store.append([NewEntry(txn=f"{entry.txn}:forged", role=entry.role, experiment_id=entry.experiment_id,
                                      attempt_id=attempt, digest=store.put(body), size=len(body))])
    return landed.seq


def test_an_appended_candidate_result_cannot_turn_a_resolved_attempt_harness_invalid(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack: append, without the key, a candidate result for a resolved attempt naming the same evidence but
    claiming an invalid harness, so that the report drops the attempt from its candidate's numbers."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    seq = append_candidate_result(store, attempt, harness_valid=False, reason="observed model differs")
    after = json.loads(report(signed, store).stdout)
    assert next(a for a in after["attempts"] if a["attempt_id"] == attempt)["terminal_class"] == "resolved"
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and ("evidence-superseded", seq) in {(f["kind"], f["seq"]) for f in found["findings"]}


def test_a_candidate_result_naming_a_junk_sandbox_profile_changes_nothing_and_crashes_nothing(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): append a candidate result whose sandbox profile names a stored object that is not a
    profile, claiming an invalid harness; the report used to die with a traceback on it."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    transcript = store.entries(attempt_id=attempt, role=Role.TRANSCRIPT)[0].digest
    append_candidate_result(store, attempt, harness_valid=False, sandbox_profile=transcript)
    built = report(signed, store)
    assert "Traceback" not in built.stderr and built.returncode == 0, built.stderr
    assert next(a for a in json.loads(built.stdout)["attempts"] if a["attempt_id"] == attempt)["resolved"]


def test_a_receipt_that_is_not_a_json_object_is_a_finding_not_a_doctor_crash(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack: an unsigned grader receipt entry whose object is a JSON array, written below the Registry API."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    receipt = store.entries(attempt_id=attempt, role=Role.GRADER_RECEIPT)[-1]
    [landed] = store.manifest.append([NewEntry(
        txn="forged:array-receipt", role=receipt.role, experiment_id=receipt.experiment_id, attempt_id=attempt,
        digest=store.put(b"[1]"), size=3, generation=2, grader_id=receipt.grader_id,
        grader_version=receipt.grader_version)])
    checked = tribunal("doctor", "--registry", store.url, "--json", env=signed["env"])
    assert "Traceback" not in checked.stderr and checked.returncode == 1
    kinds = {(f["kind"], f["seq"]) for f in json.loads(checked.stdout)["findings"]}
    assert ("signature-missing", landed.seq) in kinds and ("receipt-unreadable", landed.seq) in kinds


def test_history_rewritten_to_move_signed_records_before_the_key_is_caught(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): recompute the whole hash chain (anyone can) with one attempt's records moved before
    the signing key, where records count as unsigned history; forged pre-key records could then stand beside
    them. Signatures that bind the entry hash (so the whole history before it) no longer vouch."""
    store = copy_of(signed, tmp_path)
    victim = store.entries(role=Role.GRADER_RECEIPT)[0].attempt_id
    fields = ("txn", "role", "experiment_id", "attempt_id", "digest", "size", "generation", "grader_id",
              "grader_version", "payload", "time")
    commits: dict[int, list[dict[str, Any]]] = {}
    for entry in store.entries():
        commits.setdefault(entry.commit, []).append({name: getattr(entry, name) for name in fields})
    moved = [row for version in sorted(commits) for row in commits[version] if row["attempt_id"] == victim]
    kept = [[row for row in commits[version] if row["attempt_id"] != victim] for version in sorted(commits)]
    rewritten = [moved, *[rows for rows in kept if rows]]
    root = Path(store.url)
    shutil.rmtree(root / "log")
    shutil.rmtree(root / "segments", ignore_errors=True)
    seq, prev = 0, None
    for version, entries in enumerate(rewritten):
        rows = []
        for fields_of in entries:
            row = {**fields_of, "seq": seq, "prev_hash": prev, "commit": version}
            row["entry_hash"] = prev = entry_hash(row)
            seq += 1
            rows.append(row)
        (root / commit_key(version)).parent.mkdir(parents=True, exist_ok=True)
        (root / commit_key(version)).write_bytes(encode_table(rows_to_table(rows)))
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and "signature-missing" in {f["kind"] for f in found["findings"]}
