"""Canonical JSON and digests (SPEC §3).

Every hash in tribunal is ``sha256:<64 hex>`` over either raw blob bytes or
the canonical JSON bytes of a value: UTF-8, keys sorted, no insignificant
whitespace, no NaN or infinity. Canonicalize once, store those bytes, and
verify against the bytes read back -- never against a re-dump.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from registry._errors import CanonicalJsonError

DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


def _check(value: Any, where: str) -> None:
    """Refuse what json.dumps would silently coerce or emit non-canonically."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CanonicalJsonError(f"{where}: {value!r} has no canonical JSON form")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJsonError(f"{where}: object key {key!r} is not a string")
            _check(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]")
    elif not isinstance(value, (str, int, float, bool, type(None))):
        raise CanonicalJsonError(f"{where}: {type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Return the one canonical UTF-8 encoding of a JSON value."""
    _check(value, "$")
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CanonicalJsonError(f"$: text is not valid Unicode ({error.reason})") from None


def digest(data: bytes) -> str:
    """Return ``sha256:<hex>`` of raw bytes."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """Return the digest of a value's canonical JSON bytes."""
    return digest(canonical_json(value))


def is_digest(text: str) -> bool:
    """Tell whether ``text`` is a well-formed ``sha256:<64 hex>`` digest."""
    return bool(DIGEST_PATTERN.match(text))
