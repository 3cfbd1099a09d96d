"""Canonical JSON and digests (SPEC §3): one encoding per value, or a refusal."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry import CanonicalJsonError, canonical_json, digest, digest_json, is_digest, strict_json_loads

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=25,
)


@given(st.dictionaries(st.text(), scalars, max_size=8))
def test_key_order_does_not_change_the_bytes(mapping: dict[str, object]) -> None:
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert canonical_json(reversed_mapping) == canonical_json(mapping)
    assert digest_json(reversed_mapping) == digest_json(mapping)


@given(json_values)
def test_round_trip_is_a_fixed_point(value: object) -> None:
    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded


@given(json_values)
def test_no_insignificant_whitespace_and_sorted_keys(value: object) -> None:
    encoded = canonical_json(value)
    assert encoded == json.dumps(json.loads(encoded), sort_keys=True, separators=(",", ":"),
                                 ensure_ascii=False).encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"a": [1.0, math.nan]}])
def test_nan_and_infinity_are_refused(bad: object) -> None:
    with pytest.raises(CanonicalJsonError, match="no canonical JSON form"):
        canonical_json(bad)


def test_non_string_keys_are_refused_not_coerced() -> None:
    with pytest.raises(CanonicalJsonError, match="not a string"):
        canonical_json({1: "one"})


def test_non_json_values_are_refused() -> None:
    with pytest.raises(CanonicalJsonError, match="not a JSON value"):
        canonical_json({"when": object()})


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(CanonicalJsonError, match="not valid Unicode"):
        canonical_json("\ud800")


@given(st.text())
def test_non_ascii_text_is_utf8_not_escaped(text: str) -> None:
    encoded = canonical_json(text)
    assert json.loads(encoded.decode("utf-8")) == text
    assert b"\\u" not in encoded or "\\u" in text or any(ord(c) < 0x20 for c in text)


def test_known_encoding_and_digest() -> None:
    encoded = canonical_json({"b": [1, 2.5, "é"], "a": None, "c": True})
    assert encoded == '{"a":null,"b":[1,2.5,"é"],"c":true}'.encode()
    assert digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert is_digest(digest_json([1]))
    assert not is_digest("sha256:XYZ")


@pytest.mark.parametrize("text", [
    '{"passed": false, "passed": true}',
    '{"a": {"k": 1, "k": 2}}',
    '{"passed": true, "score": NaN}',
    '{"passed": true, "score": Infinity}',
    '{"passed": true, "score": -Infinity}',
    '{"passed": true, "score": 1e999}',
    '[-1e999]',
])
def test_strict_loading_refuses_ambiguous_json(text: str) -> None:
    """Attack: duplicate keys (readers disagree on which wins) or non-finite numbers smuggled into a decision."""
    with pytest.raises(CanonicalJsonError):
        strict_json_loads(text)
    with pytest.raises(CanonicalJsonError):
        strict_json_loads(text.encode())


def test_strict_loading_refuses_bytes_that_are_not_utf8() -> None:
    """Attack: UTF-16 or Latin-1 output that a lenient reader would guess its way through."""
    with pytest.raises(ValueError, match="utf-8"):
        strict_json_loads('{"passed": true}'.encode("utf-16"))


def test_strict_loading_refuses_nesting_too_deep_to_parse() -> None:
    """Attack: a megabyte of '[' that would crash the reader with a RecursionError instead of a refusal."""
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        strict_json_loads("[" * 100_000)


@settings(deadline=None)  # a first call slowed by a busy machine is not a failure of the property
@given(json_values)
def test_strict_loading_reads_what_canonical_json_writes(value: object) -> None:
    assert strict_json_loads(canonical_json(value)) == value
