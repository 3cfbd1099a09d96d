"""Canonical JSON and digests (SPEC §3).

Every hash in tribunal is ``sha256:<64 hex>`` over either raw blob bytes or
the canonical JSON bytes of a value: UTF-8, keys sorted, no insignificant
whitespace, no NaN or infinity. Canonicalize once, store those bytes, and
verify against the bytes read back -- never against a re-dump.

Untrusted JSON that decides something (a grader's or judge's ``passed``, a
candidate's identity report) is read with ``strict_json_loads``: the reading
must be the only one, so duplicate keys (Python keeps the last, other readers
the first) and non-finite numbers (which no record can hold) are refused.
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


_PLAIN = frozenset({str, int, bool, type(None)})
"""Types that need no check (exact types: a subclass takes the long way)."""


def _check(value: Any, where: str) -> None:
    """Refuse what json.dumps would silently coerce or emit non-canonically.

    Plain values are passed over without a call or a path string each: every
    record doctor re-seals goes through here.
    """
    if type(value) in _PLAIN:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise CanonicalJsonError(f"{where}: {value!r} has no canonical JSON form")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJsonError(f"{where}: object key {key!r} is not a string")
            if type(item) not in _PLAIN:
                _check(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if type(item) not in _PLAIN:
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


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise CanonicalJsonError(f"duplicate object key {key!r}")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise CanonicalJsonError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise CanonicalJsonError(f"{text} overflows to {value}")
    return value


def json_loads(data: bytes | str, **options: Any) -> Any:
    """``json.loads``, except that nesting too deep for the parser (a megabyte of ``[`` in a stored object or a
    user's file) raises ``json.JSONDecodeError`` like any other text that is not JSON, not ``RecursionError``."""
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", "", 0) from None


def strict_json_loads(data: bytes | str) -> Any:
    """Parse JSON that has exactly one reading: UTF-8, no duplicate keys, no NaN or infinity.

    Raises ``CanonicalJsonError`` for an ambiguous document and
    ``json.JSONDecodeError`` / ``UnicodeDecodeError`` for one that is not JSON
    (nesting too deep for the parser included); all are ``ValueError``. The
    messages may quote the input: callers that record them must not pass
    untrusted text on.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return json_loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite_float)


def digest(data: bytes) -> str:
    """Return ``sha256:<hex>`` of raw bytes."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """Return the digest of a value's canonical JSON bytes."""
    return digest(canonical_json(value))


def is_digest(text: str) -> bool:
    """Tell whether ``text`` is a well-formed ``sha256:<64 hex>`` digest."""
    return bool(DIGEST_PATTERN.match(text))
