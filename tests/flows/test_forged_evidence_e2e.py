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

import pyarrow as pa
import pytest

from registry import Judgement, NewEntry, Registry, Role, canonical_json, digest
from registry._entry import entry_hash, rows_to_table
from registry._layout import commit_key
from registry._objects import object_key
from registry._parquet import decode_table, encode_table
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


ROW_FIELDS = ("txn", "role", "experiment_id", "attempt_id", "digest", "size", "generation", "grader_id",
              "grader_version", "payload", "time")


def commit_rows(store: Registry) -> list[list[dict[str, Any]]]:
    """The registry's entries as rows, one list per commit, in order (without their chain fields)."""
    commits: dict[int, list[dict[str, Any]]] = {}
    for entry in store.entries():
        commits.setdefault(entry.commit, []).append({name: getattr(entry, name) for name in ROW_FIELDS})
    return [commits[version] for version in sorted(commits)]


def rewrite_history(store: Registry, commits: list[list[dict[str, Any]]]) -> None:
    """Replace the whole log with ``commits``, the hash chain recomputed (anyone can: it needs no key)."""
    root = Path(store.url)
    shutil.rmtree(root / "log")
    shutil.rmtree(root / "segments", ignore_errors=True)
    seq, prev = 0, None
    for version, entries in enumerate(commits):
        rows = []
        for fields_of in entries:
            row = {**fields_of, "seq": seq, "prev_hash": prev, "commit": version}
            row["entry_hash"] = prev = entry_hash(row)
            seq += 1
            rows.append(row)
        (root / commit_key(version)).parent.mkdir(parents=True, exist_ok=True)
        (root / commit_key(version)).write_bytes(encode_table(rows_to_table(rows)))


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
    commits = commit_rows(store)
    moved = [row for rows in commits for row in rows if row["attempt_id"] == victim]
    kept = [[row for row in rows if row["attempt_id"] != victim] for rows in commits]
    rewrite_history(store, [moved, *[rows for rows in kept if rows]])
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and "signature-missing" in {f["kind"] for f in found["findings"]}


def test_a_chain_rebuilt_with_the_real_key_copied_last_is_caught_by_a_stranger(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): rebuild the whole chain with every record (here: the real ones, re-ordered) before a copy
    of the real public key's record, with the signatures dropped: before a registry's first key everything is
    unsigned history, which no signature by the trusted key after it covers."""
    store = copy_of(signed, tmp_path)
    commits = commit_rows(store)
    keys = [row for rows in commits for row in rows if row["role"] == "signing-key"]
    rest = [[row for row in rows if row["role"] not in ("signing-key", "signature")] for rows in commits]
    rewrite_history(store, [*[rows for rows in rest if rows], keys])
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and "unsigned-history" in {f["kind"] for f in found["findings"]}, found["findings"]
    assert doctor(signed["registry"].as_posix(), signed["env"], "--trust", signed["public"])[0] == 0


def test_an_unsealed_judgement_cannot_make_a_resolved_attempt_a_judge_failure(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): on a case that names no judge, append (without the key: neither role is signed) a
    candidate truth and a generation-1 judgement saying no, with no evidence receipt sealing it."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    experiment = store.entries(attempt_id=attempt)[0].experiment_id
    truth = canonical_json({"schema_version": "tribunal.candidate_truth.v1", "attempt_id": attempt})
    judgement = canonical_json({
        "schema_version": "tribunal.judgement.v1", "generation": 1, "prev_judgement_hash": None,
        "judge_policy_hash": "sha256:" + "0" * 64, "adapter_digest": "sha256:" + "0" * 64,
        "scoring_id": "sha256:" + "1" * 64,
        "candidate_truth_hash": digest(truth), "passed": False, "failure": None,
        "evidence_digest": store.put(b"no"),
    })
    forged = store.append([
        NewEntry(txn=f"forged:{attempt}:{role.value}", role=role.value, experiment_id=experiment,
                 attempt_id=attempt, digest=store.put(body), size=len(body), generation=1)
        for role, body in ((Role.CANDIDATE_TRUTH, truth), (Role.JUDGEMENT, judgement))])
    assert store.load(forged[1].digest, Judgement).passed is False  # a well-formed judgement record
    after = json.loads(report(signed, store).stdout)
    assert next(a for a in after["attempts"] if a["attempt_id"] == attempt)["terminal_class"] == "resolved"
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and ("judgement-unsealed", forged[1].seq) in {(f["kind"], f["seq"]) for f in found["findings"]}


def test_a_signing_key_record_that_is_not_base64_is_a_finding_not_a_traceback(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): a signing-key record whose public key is not base64 made doctor, report, run and
    regrade die with a traceback. It is damage: doctor names it, the writers and readers refuse with its message."""
    store = copy_of(signed, tmp_path)
    body = canonical_json({"schema_version": "tribunal.signing_key.v1", "key_id": "ed25519:0", "public_key": "A"})
    [landed] = store.append([NewEntry(txn="forged:key", role="signing-key", experiment_id="registry",
                                      digest=store.put(body), size=len(body))])
    checked = tribunal("doctor", "--registry", store.url, "--json", "--trust", signed["public"], env=signed["env"])
    assert "Traceback" not in checked.stderr and checked.returncode == 1, checked.stderr
    assert ("signing-key-unreadable", landed.seq) in {
        (f["kind"], f["seq"]) for f in json.loads(checked.stdout)["findings"]}
    for command in (("report", "--format", "json"), ("run",)):
        refused = tribunal(*command[:1], "--plan", str(signed["plan"]), "--registry", store.url, "--config",
                           str(signed["config"]), *command[1:], env=signed["env"])
        assert "Traceback" not in refused.stderr and refused.returncode != 0, refused.stderr
        assert "not a public key record" in refused.stderr and "tribunal doctor" in refused.stderr


def test_a_deeply_nested_grader_result_is_a_finding_not_a_traceback(signed: dict[str, Any], tmp_path: Path) -> None:
    """Attack (red team): a grader result of a hundred thousand ``[`` (valid prefix, too deep for the parser)
    crashed doctor with a RecursionError."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    entry = store.entries(attempt_id=attempt, role=Role.GRADER_RESULT)[-1]
    before = json.loads(report(signed, store).stdout)
    body = b"[" * 100_000
    [landed] = store.append([NewEntry(txn="forged:deep", role=entry.role, experiment_id=entry.experiment_id,
                                      attempt_id=attempt, digest=store.put(body), size=len(body),
                                      generation=entry.generation)])
    checked = tribunal("doctor", "--registry", store.url, "--json", env=signed["env"])
    assert "Traceback" not in checked.stderr and checked.returncode == 1, checked.stderr[-2000:]
    assert ("receipt-result-mismatch", landed.seq) in {
        (f["kind"], f["seq"]) for f in json.loads(checked.stdout)["findings"]}
    built = report(signed, store)
    assert "Traceback" not in built.stderr and built.returncode == 0, built.stderr[-2000:]
    after = json.loads(built.stdout)  # no receipt seals the forged result: the verdict stands as it was sealed
    assert after["attempts"] == before["attempts"] and after["candidates"] == before["candidates"]


def test_a_log_cut_short_verifies_only_for_a_stranger_who_does_not_pin_the_head(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): delete the last commits (the last gradings, the experiment record, the reports); every
    signature left still verifies. Only a head published elsewhere can show it, and doctor says so."""
    head = Registry.open(str(signed["registry"])).head()
    assert head is not None
    store = copy_of(signed, tmp_path)
    for version in range(head.version - 4, head.version + 1):
        (Path(store.url) / commit_key(version)).unlink()
    unpinned = tribunal("doctor", "--registry", store.url, "--trust", signed["public"], env=signed["env"])
    assert unpinned.returncode == 0 and "not pinned" in unpinned.stdout, unpinned.stdout
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"], "--pin",
                         f"{head.seq}:{head.entry_hash}")
    assert code == 1 and ("pin-missing", head.seq) in {(f["kind"], f["seq"]) for f in found["findings"]}


def test_an_entry_edited_in_place_with_its_old_hash_is_refused_by_readers(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): point a resolved attempt's candidate result entry at a forged result claiming failure,
    keeping the entry's old hash so the next entry still links to it; the report used to print the forgery."""
    store = copy_of(signed, tmp_path)
    attempt = resolved_attempt(store, signed)
    entry = store.entries(attempt_id=attempt, role=Role.CANDIDATE_RESULT)[0]
    body = canonical_json({**json.loads(store.get(entry.digest)), "succeeded": False})
    key = commit_key(entry.commit)
    rows = [{**row, "digest": store.put(body), "size": len(body)} if row["seq"] == entry.seq else row
            for row in decode_table(store.storage.read(key), key).to_pylist()]
    (Path(store.url) / key).write_bytes(encode_table(rows_to_table(rows)))
    refused = report(signed, Registry.open(store.url))
    assert "Traceback" not in refused.stderr and refused.returncode != 0, refused.stderr[-2000:]
    assert f"entry {entry.seq} does not hash to its entry_hash" in refused.stderr
    code, found = doctor(store.url, signed["env"], "--trust", signed["public"])
    assert code == 1 and ("entry-hash-mismatch", entry.seq) in {(f["kind"], f["seq"]) for f in found["findings"]}


def test_a_commit_holding_text_that_is_not_utf8_is_a_finding_not_a_traceback(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): a well-chained next commit whose txn bytes are not UTF-8 crashed doctor."""
    store = copy_of(signed, tmp_path)
    head = store.head()
    assert head is not None
    row = {"txn": "x", "role": "transcript", "experiment_id": "demo", "attempt_id": None, "digest": digest(b"x"),
           "size": 1, "generation": None, "grader_id": None, "grader_version": None, "payload": None,
           "time": "2026-12-04T00:00:00.000000Z", "seq": head.seq + 1, "prev_hash": head.entry_hash,
           "commit": head.version + 1}
    row["entry_hash"] = entry_hash(row)
    table = rows_to_table([row])
    offsets = pa.array([0, 2], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    table = table.set_column(table.schema.get_field_index("txn"), table.schema.field("txn"), pa.chunked_array([bad]))
    (Path(store.url) / commit_key(head.version + 1)).write_bytes(encode_table(table))
    code, found = doctor(store.url, signed["env"])
    assert code == 1 and ("commit-unreadable", None) in {(f["kind"], f["seq"]) for f in found["findings"]}
    refused = report(signed, Registry.open(store.url))
    assert "Traceback" not in refused.stderr and "malformed values" in refused.stderr, refused.stderr[-2000:]


def test_a_directory_planted_where_an_object_would_be_is_a_finding_not_a_traceback(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): a directory named like an object that no entry names crashed doctor's object pass."""
    store = copy_of(signed, tmp_path)
    planted = "sha256:" + "0" * 64
    (Path(store.url) / object_key(planted)).mkdir(parents=True)
    code, found = doctor(store.url, signed["env"])
    assert code == 1 and [f["kind"] for f in found["findings"]] == ["object-corrupt"], found["findings"]


def test_a_plan_entry_that_is_not_a_plan_stops_report_and_series_with_a_message(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """Attack (red team): a plan entry whose object is not a plan crashed report and series with a validation
    traceback. Appended without the key it is an unsigned plan; signed by a careless holder of the key, it is
    named as not a plan."""
    body = b'{"not": "a plan"}'
    forged = copy_of(signed, tmp_path / "forger")
    entry = NewEntry(txn="plan:forged", role=Role.PLAN.value, experiment_id="demo", digest=forged.put(body),
                     size=len(body))
    [landed] = forged.manifest.append([entry])  # below the Registry API: no key
    careless = copy_of(signed, tmp_path / "careless")
    careless.put(body)
    Registry.open(careless.url, key_file=str(signed["registry"].parent / "keys" / "signing.pem")).append([entry])
    for store, message in ((forged, f"plan (seq {landed.seq}) carries no valid signature by a trusted key"),
                           (careless, f"object {digest(body)} is not a valid Plan record")):
        for refused in (report(signed, store), tribunal("series", "demo", "--registry", store.url, env=signed["env"])):
            assert "Traceback" not in refused.stderr and refused.returncode != 0, refused.stderr[-2000:]
            assert message in refused.stderr, refused.stderr


def test_a_report_appended_without_the_key_cannot_be_compared(signed: dict[str, Any], tmp_path: Path) -> None:
    """Attack (red team): `report --compare` read any entry of role report; a forger appends a report whose
    numbers say what they like and has a stranger compare the owner's report with it."""
    store = copy_of(signed, tmp_path)
    real = store.entries(role=Role.REPORT)[-1]
    body = canonical_json({**json.loads(store.get(real.digest)), "candidates": []})
    forged = NewEntry(txn="forged:report", role=Role.REPORT.value, experiment_id=real.experiment_id,
                      digest=store.put(body), size=len(body))
    store.manifest.append([forged])  # below the Registry API: the forger has no key
    compared = tribunal("report", "--compare", real.digest, digest(body), "--registry", store.url,
                        "--format", "json", env=signed["env"])
    assert compared.returncode != 0 and "Traceback" not in compared.stderr, compared.stderr[-2000:]
    assert "fail signature verification" in " ".join(compared.stderr.split())
