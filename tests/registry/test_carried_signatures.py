"""Signatures carried in their commit (the ``payload`` column), and registries written before it existed."""

from __future__ import annotations

import base64
from pathlib import Path

from registry import NewEntry, Registry, Role, Signer, canonical_json, check_registry, write_private_key
from registry._chain import check_entry_hashes
from registry._entry import LEGACY_SCHEMA, entry_hash, rows_to_table
from registry._parquet import decode_table, encode_table
from registry._signatures import ensure_signed
from registry._signing import SIGNATURE_ROLE, Subject


def signed(url: str, tmp_path: Path) -> tuple[Registry, Signer]:
    signer = Signer.generate()
    write_private_key(signer, tmp_path / "key.pem")
    Registry.open(url).add_signing_key(Signer.load(str(tmp_path / "key.pem")))
    return Registry.open(url, key_file=str(tmp_path / "key.pem")), signer


def receipt(registry: Registry, n: int) -> NewEntry:
    data = f"receipt {n}".encode()
    return NewEntry(txn=f"grade-{n}", role=Role.GRADER_RECEIPT.value, experiment_id="exp",
                    attempt_id=f"sha256:{n:064x}", digest=registry.put(data), size=len(data), generation=1)


def kinds(url: str) -> dict[str, list[int | None]]:
    found: dict[str, list[int | None]] = {}
    for finding in check_registry(Registry.open(url)).findings:
        found.setdefault(finding.kind, []).append(finding.seq)
    return found


def test_a_signed_append_carries_its_signature_in_the_commit_and_stores_no_object(store_url: str,
                                                                                  tmp_path: Path) -> None:
    registry, _ = signed(store_url, tmp_path)
    registry.append([receipt(registry, 1)])
    signature = Registry.open(store_url).entries(role=SIGNATURE_ROLE)[-1]
    assert signature.payload is not None and not registry.objects.exists(signature.digest)
    report = check_registry(Registry.open(store_url))
    assert report.clean and report.signing is not None and report.signing.signed_records == 1


def test_signatures_stored_as_objects_before_payloads_existed_still_verify(store_url: str, tmp_path: Path) -> None:
    """An earlier version wrote each signature as an object its entry names; those registries keep verifying."""
    registry, signer = signed(store_url, tmp_path)
    draft = receipt(registry, 2)
    data = canonical_json(signer.sign([Subject(txn=draft.txn, role=draft.role, experiment_id=draft.experiment_id,
                                               attempt_id=draft.attempt_id, generation=draft.generation,
                                               digest=draft.digest)]).model_dump(mode="json"))
    registry.manifest.append([draft, NewEntry(txn=f"{draft.txn}:signature", role=SIGNATURE_ROLE, experiment_id="exp",
                                              attempt_id=draft.attempt_id, digest=registry.put(data),
                                              size=len(data))])
    report = check_registry(Registry.open(store_url))
    assert report.clean and report.signing is not None and report.signing.signed_records == 1
    ensure_signed(Registry.open(store_url), "exp")


def test_a_carried_record_that_is_not_its_digests_bytes_is_a_finding(store_url: str, tmp_path: Path) -> None:
    """Attack: a writer without the key pairs a real signature's digest and subjects with other bytes, or a
    real signature's bytes with another digest, hoping a reader trusts the digest it was shown."""
    registry, _ = signed(store_url, tmp_path)
    registry.append([receipt(registry, 3)])
    real = Registry.open(store_url).entries(role=SIGNATURE_ROLE)[-1]
    assert real.payload is not None
    forged = receipt(registry, 4)
    other = base64.b64encode(base64.b64decode(real.payload).replace(b'"signature":"', b'"signature":"A')).decode()
    registry.manifest.append([forged, NewEntry(txn=f"{forged.txn}:signature", role=SIGNATURE_ROLE,
                                               experiment_id="exp", attempt_id=forged.attempt_id, digest=real.digest,
                                               size=real.size, payload=other)])
    found = kinds(store_url)
    assert set(found) == {"payload-corrupt", "signature-missing"}
    assert found["payload-corrupt"] == [real.seq + 2] and found["signature-missing"] == [real.seq + 1]


def test_commits_written_before_payloads_existed_decode_with_their_hashes_intact() -> None:
    """A commit file in the schema of earlier versions reads as entries that carry nothing, and the entry
    hashes it was written with still hold (a null field is left out of the hash)."""
    rows = [{"seq": 0, "prev_hash": None, "txn": "t0", "role": "transcript", "experiment_id": "exp",
             "attempt_id": None, "digest": "sha256:" + "0" * 64, "size": 1, "generation": None, "grader_id": None,
             "grader_version": None, "payload": None, "time": "2026-12-01T00:00:00Z", "commit": 0}]
    rows[0]["entry_hash"] = entry_hash(rows[0])
    legacy = rows_to_table(rows).drop_columns(["payload"])
    assert legacy.schema.equals(LEGACY_SCHEMA)
    decoded = decode_table(encode_table(legacy), "commit 0")
    assert decoded.column("payload").to_pylist() == [None] and not check_entry_hashes(decoded)

