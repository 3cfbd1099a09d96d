"""Content-addressed, write-once object store (SPEC §4).

An object lives at ``objects/sha256/<first two hex>/<64 hex>``. Writing bytes
that already exist writes nothing; reading verifies the bytes against their
address, so a flipped byte is an error, never silently served.
"""

from __future__ import annotations

from collections.abc import Iterator

from registry._canonical import DIGEST_PREFIX, digest, is_digest
from registry._errors import ObjectCorrupt, ObjectMissing, RegistryError
from registry._storage import Storage

OBJECTS_DIR = "objects/sha256"


def object_key(object_digest: str) -> str:
    """Return the storage key of a digest."""
    if not is_digest(object_digest):
        raise RegistryError(f"{object_digest!r} is not a sha256:<64 hex> digest")
    hex_part = object_digest[len(DIGEST_PREFIX) :]
    return f"{OBJECTS_DIR}/{hex_part[:2]}/{hex_part}"


class ObjectStore:
    """Blobs addressed by the SHA-256 of their bytes."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its digest."""
        object_digest = digest(data)
        self.storage.put_if_absent(object_key(object_digest), data)
        return object_digest

    def get(self, object_digest: str) -> bytes:
        """Return the bytes of ``object_digest``, verified against the address."""
        try:
            data = self.storage.read(object_key(object_digest))
        except FileNotFoundError:
            raise ObjectMissing(f"object {object_digest} is not in the registry") from None
        if digest(data) != object_digest:
            raise ObjectCorrupt(f"object {object_digest}: stored bytes do not match the address")
        return data

    def exists(self, object_digest: str) -> bool:
        """Tell whether the store holds ``object_digest`` (without verifying it)."""
        return self.storage.exists(object_key(object_digest))

    def digests(self) -> Iterator[str]:
        """Yield every stored digest, in address order."""
        for fan_out in self.storage.list(OBJECTS_DIR):
            for name in self.storage.list(f"{OBJECTS_DIR}/{fan_out}"):
                yield DIGEST_PREFIX + name
