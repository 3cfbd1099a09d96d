"""SWE-bench predictions files: JSONL (or one JSON list) of
``{"instance_id", "model_name_or_path", "model_patch"}``; instance_id is the case id.

Parsed at freeze time, so a malformed file is refused before any attempt runs.
"""

from __future__ import annotations

import json

from registry._errors import SpecError


def parse_predictions(data: bytes, source: str) -> dict[str, dict[str, str]]:
    """Return predictions keyed by instance_id, or raise SpecError naming the line."""
    try:
        text = data.decode("utf-8")
        if text.lstrip().startswith("["):
            records = list(enumerate(json.loads(text), start=1))
        else:
            records = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SpecError(f"{source}: not SWE-bench predictions JSONL or a JSON list ({error})") from None
    found: dict[str, dict[str, str]] = {}
    for number, record in records:
        if not isinstance(record, dict) or not isinstance(record.get("instance_id"), str):
            raise SpecError(f"{source}: record {number}: needs a string instance_id")
        if not isinstance(record.get("model_patch") or "", str):
            raise SpecError(f"{source}: record {number}: model_patch must be a string")
        found[record["instance_id"]] = {
            "model_name_or_path": str(record.get("model_name_or_path") or ""),
            "model_patch": record.get("model_patch") or "",
        }
    return found
