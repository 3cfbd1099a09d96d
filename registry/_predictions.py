"""SWE-bench predictions files: JSONL (or one JSON list) of
``{"instance_id", "model_name_or_path", "model_patch"}``; instance_id is the case id.

Parsed at freeze time, so a malformed file is refused before any attempt runs.
A file must mean one thing: a second prediction for the same case, or a record
with a key twice, is refused rather than letting the last one silently win.
"""

from __future__ import annotations

from registry._canonical import strict_json_loads
from registry._errors import SpecError


def _records(text: str, source: str) -> list[tuple[str, object]]:
    """Each record with where it is: ``line N`` of JSONL, or ``record N`` of a JSON list."""
    if text.lstrip().startswith("["):
        try:
            return [(f"record {n}", record) for n, record in enumerate(strict_json_loads(text), start=1)]
        except ValueError as error:
            raise SpecError(f"{source}: not a JSON list of SWE-bench predictions ({error})") from None
    records: list[tuple[str, object]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append((f"line {n}", strict_json_loads(line)))
            except ValueError as error:
                raise SpecError(f"{source}: line {n}: not a SWE-bench prediction in JSON ({error})") from None
    return records


def parse_predictions(data: bytes, source: str) -> dict[str, dict[str, str]]:
    """Return predictions keyed by instance_id, or raise SpecError naming the line (or record)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    found: dict[str, dict[str, str]] = {}
    first: dict[str, str] = {}
    for where, record in _records(text, source):
        if not isinstance(record, dict) or not isinstance(record.get("instance_id"), str):
            raise SpecError(f"{source}: {where}: needs a string instance_id")
        if not isinstance(record.get("model_patch") or "", str):
            raise SpecError(f"{source}: {where}: model_patch must be a string")
        instance = record["instance_id"]
        if instance in first:
            raise SpecError(f"{source}: {where}: duplicate instance_id {instance!r} (first at {first[instance]})")
        first[instance] = where
        found[instance] = {
            "model_name_or_path": str(record.get("model_name_or_path") or ""),
            "model_patch": record.get("model_patch") or "",
        }
    return found
