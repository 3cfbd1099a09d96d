"""Doctor's signature checks (SPEC §12): every signed record carries a valid signature by a trusted key.

Trust comes from the reader, not the registry, when the reader says so:
``--trust KEY`` (a public key obtained out of band) replaces the registry's
own anchor, so a registry rewritten with an attacker's anchor fails every
signature for a stranger who trusts the real key. Records written before a
registry's first key are counted as unsigned history, not as findings -- for
a stranger, only when a trusted signature after them binds the chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from registry._canonical import strict_json_loads
from registry._chain import Finding
from registry._errors import RegistryError
from registry._manifest import READ_BATCH
from registry._models import Strict
from registry._objects import object_key
from registry._registry import Registry
from registry._signing import (
    SIGNATURE_ROLE,
    SIGNED_ROLES,
    SIGNING_KEY_ROLE,
    Signature,
    SigningError,
    SigningKeyRecord,
    entry_signature,
    key_id,
    subjects_bytes,
    trusted_keys,
    verifies,
)

SUBJECT_COLUMNS = ("txn", "role", "experiment_id", "attempt_id", "generation", "digest")


class SigningStatus(Strict):
    """What doctor says about signatures, findings apart."""

    state: Literal["unsigned", "signed"]
    trusted_by: Literal["registry anchor", "--trust"]
    anchor: str | None = None
    trusted: tuple[str, ...] = ()
    signed_records: int = 0
    unsigned_history: int = 0
    """Signed-role records written before the registry's first key (verifiable by hash only)."""

    def line(self) -> str:
        """The one line doctor prints."""
        if self.state == "unsigned":
            return "unsigned registry: no signing key recorded (run `tribunal key init --registry ...`)"
        source = ("the registry's own anchor (pass --trust KEY to check against a key you obtained yourself)"
                  if self.trusted_by == "registry anchor" else "the key(s) given with --trust")
        history = f"; {self.unsigned_history} records predate the first key" if self.unsigned_history else ""
        return (f"signatures: {self.signed_records} signed records verified against {source}: "
                f"{', '.join(self.trusted) or 'none trusted'}{history}")


def _load(registry: Registry, digests: list[str], model: type[Signature] | type[SigningKeyRecord]
          ) -> list[Signature | SigningKeyRecord | None]:
    """Records by digest; an unreadable one is None (the object checks report why)."""
    loaded: list[Signature | SigningKeyRecord | None] = []
    for data in registry.storage.read_many([object_key(digest) for digest in digests]):
        try:
            loaded.append(model.model_validate(strict_json_loads(data or b"")))
        except (ValueError, ValidationError, RegistryError):
            loaded.append(None)
    return loaded


SubjectKey = bytes
"""The SHA-256 of a subject's fields (``repr`` of their tuple, in ``SUBJECT_COLUMNS`` order, then ``entry_hash`` or
None): equal exactly when the ``Subject`` models are, and 32 bytes where the fields are hundreds (doctor keeps one
per signed record)."""


def _key(fields: tuple[object, ...]) -> SubjectKey:
    return hashlib.sha256(repr(fields).encode("utf-8", "backslashreplace")).digest()


def _rows(table: pa.Table, roles: Iterable[str]) -> Iterator[list[dict[str, object]]]:
    """The rows of ``roles`` in seq order, a batch at a time (a list of dicts per row costs memory at 1M rows)."""
    chosen = table.filter(pc.is_in(table.column("role"), value_set=pa.array(sorted(roles), pa.string())))
    chosen = chosen.select(["seq", "payload", "entry_hash", *SUBJECT_COLUMNS])
    for start in range(0, chosen.num_rows, READ_BATCH):
        yield chosen.slice(start, READ_BATCH).to_pylist()


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _describe(row: dict[str, object]) -> str:
    where = f" of attempt {row['attempt_id']}" if row["attempt_id"] else ""
    generation = f", generation {row['generation']}" if row["generation"] is not None else ""
    return f"{row['role']}{where}{generation} (seq {row['seq']})"


@dataclass(frozen=True)
class Trust:
    """Whose signatures count, decided before any signature is read: the anchor's, or ``--trust``'s."""

    trusted_by: Literal["registry anchor", "--trust"]
    keys: list[SigningKeyRecord]
    trusted: dict[str, bytes]
    first_key: int | None
    """The seq of the registry's first signing key (None: an unsigned registry)."""
    findings: list[Finding]


def signing_trust(registry: Registry, table: pa.Table, roots: list[bytes] | None) -> Trust:
    """The keys ``table``'s records are verified against, with what is wrong with the recorded ones."""
    trusted_by: Literal["registry anchor", "--trust"] = "registry anchor" if roots is None else "--trust"
    key_rows = [row for rows in _rows(table, [SIGNING_KEY_ROLE]) for row in rows]
    if not key_rows:
        findings = [] if roots is None else [Finding(
            kind="registry-unsigned", message="no signing key is recorded: nothing here can verify against --trust")]
        return Trust(trusted_by, [], {}, None, findings)
    loaded = _load(registry, [str(row["digest"]) for row in key_rows], SigningKeyRecord)
    records = [record for record in loaded if isinstance(record, SigningKeyRecord)]
    trusted = trusted_keys(records, roots)
    findings = []
    for row, record in zip(key_rows, loaded, strict=True):
        if not isinstance(record, SigningKeyRecord):
            findings.append(Finding(kind="signing-key-unreadable", seq=int(str(row["seq"])), digest=str(row["digest"]),
                                    message=f"the signing-key record at seq {row['seq']} is not a public key record"))
        elif record.key_id not in trusted:
            findings.append(Finding(kind="signing-key-untrusted", seq=int(str(row["seq"])), message=(
                f"signing key {record.key_id} (seq {row['seq']}) is neither trusted nor endorsed by a trusted key")))
    return Trust(trusted_by, records, trusted, int(str(key_rows[0]["seq"])), findings)


def vouch(signatures: Iterable[tuple[int, str, Signature | None]], trusted: dict[str, bytes]
          ) -> tuple[set[SubjectKey], list[Finding]]:
    """The subjects that (seq, digest, signature) triples vouch for with valid signatures of trusted keys;
    a signature that does not verify is a finding."""
    vouched: set[SubjectKey] = set()
    findings = []
    for seq, digest, signature in signatures:
        if signature is None:
            continue
        public = trusted.get(signature.key_id)
        if public is None:
            continue  # an untrusted key's signature vouches for nothing; the records it covers are reported
        if not verifies(public, signature.signature, subjects_bytes(signature.subjects)):
            findings.append(Finding(kind="signature-invalid", seq=seq, digest=digest,
                                    message=f"the signature at seq {seq} does not verify with {signature.key_id}"))
            continue
        vouched.update(_key((*(getattr(subject, name) for name in SUBJECT_COLUMNS), subject.entry_hash))
                       for subject in signature.subjects)
    return vouched, findings


def unvouched(table: pa.Table, trust: Trust, vouched: set[SubjectKey]) -> tuple[SigningStatus, list[Finding]]:
    """Every signed-role record after the first key must be vouched for; the status doctor prints.

    Records before the first key (a registry signed after it began) are
    history no signature names. For a stranger (``--trust``) they stand only
    when a signature by a trusted key that binds an entry hash comes after
    them: that hash covers the whole chain before it. Without one, anyone
    could rebuild the chain with whatever records before a copy of the real
    key's record.
    """
    if trust.first_key is None:
        return SigningStatus(state="unsigned", trusted_by=trust.trusted_by), []
    findings = []
    signed = history = 0
    covered = False
    for rows in _rows(table, SIGNED_ROLES):
        for row in rows:
            seq = int(str(row["seq"]))
            signed += 1
            history += seq < trust.first_key
            if seq < trust.first_key:
                continue
            fields = tuple(row[name] for name in SUBJECT_COLUMNS)
            bound = _key((*fields, row["entry_hash"])) in vouched
            covered = covered or bound
            if not bound and _key((*fields, None)) not in vouched:  # or signed before entry hashes were bound
                findings.append(Finding(kind="signature-missing", seq=seq, digest=str(row["digest"]),
                                        message=f"{_describe(row)} carries no valid signature by a trusted key"))
    if history and not covered and trust.trusted_by == "--trust":
        findings.append(Finding(kind="unsigned-history", seq=trust.first_key, message=(
            f"{history} signed-role records predate the first signing key (seq {trust.first_key}) and no "
            "signature by a trusted key after it covers them: nothing vouches for them")))
    status = SigningStatus(state="signed", trusted_by=trust.trusted_by,
                           anchor=trust.keys[0].key_id if trust.keys else None, trusted=tuple(sorted(trust.trusted)),
                           signed_records=signed - history, unsigned_history=history)
    return status, findings


def check_signatures(registry: Registry, table: pa.Table, roots: list[bytes] | None
                     ) -> tuple[SigningStatus, list[Finding]]:
    """Verify every signature and that every signed-role record after the first key has one by a trusted key."""
    trust = signing_trust(registry, table, roots)
    vouched: set[SubjectKey] = set()
    findings = list(trust.findings)
    if trust.first_key is not None:
        for rows in _rows(table, [SIGNATURE_ROLE]):
            legacy = [str(row["digest"]) for row in rows if row["payload"] is None]
            stored = dict(zip(legacy, registry.storage.read_many([object_key(d) for d in legacy]), strict=True))
            found, invalid = vouch(((int(str(row["seq"])), str(row["digest"]),
                                     entry_signature(_text(row["payload"]), str(row["digest"]), stored.get))
                                    for row in rows), trust.trusted)
            vouched |= found
            findings += invalid
    status, missing = unvouched(table, trust, vouched)
    return status, findings + missing


def trust_roots(keys: list[bytes]) -> list[bytes] | None:
    """``--trust`` values as roots (None: the registry's anchor), deduplicated by key id."""
    return list({key_id(key): key for key in keys}.values()) or None


def ensure_signed(registry: Registry, experiment_id: str) -> None:
    """Refuse to build on an experiment whose signed records do not all verify against the registry's anchor.

    Run, regrade, rejudge and report read verdicts back (an attempt with a
    receipt counts as sealed); in a signed registry a receipt no trusted key
    signed must not count, so the command stops with doctor's first finding.
    Unsigned registries are left to doctor's re-derivation.
    """
    table = registry.table()
    scope = table.filter(pc.field("experiment_id").isin([experiment_id, "registry"]))
    if not scope.filter(pc.field("role") == SIGNING_KEY_ROLE).num_rows:
        return
    _, findings = check_signatures(registry, scope, None)
    if findings:
        raise SigningError(f"{len(findings)} records of {experiment_id} fail signature verification, e.g. "
                           f"{findings[0].message}; run `tribunal doctor`")
