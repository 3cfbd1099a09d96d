"""Redaction benchmark: time linear in the transcript, not in the number of identity strings (SPEC §13).

A candidate controls both how much it prints (up to the 16 MiB transcript cap)
and how many session ids it reports; redaction runs outside every timeout, so
its cost must not multiply the two. Measured: redaction of a 16 MiB transcript
with 3 and with 3,000 session ids (the baseline is the same transcript with
3 ids, in the same run). Target: 3,000 ids x 16 MiB under 10 s.

usage: python benchmarks/redaction_bench.py
Results go to benchmarks/RESULTS.md (section "redaction").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import write_section  # noqa: E402
from tasks.redaction import build_patterns, redact_artifacts  # noqa: E402

MIB = 1024 * 1024
LINE = b"def handler(event, context):  # retry the upload of chunk 17 and log the response body\n"


def transcript(sessions: list[str]) -> bytes:
    """16 MiB of ordinary output with every reported session id printed once, spread through it."""
    body = LINE * (16 * MIB // len(LINE))
    step = max(1, len(body) // (len(sessions) + 1))
    parts, start = [], 0
    for session in sessions:
        cut = body.index(b"\n", start + step) + 1 if start + step < len(body) else len(body)
        parts += [body[start:cut], session.encode() + b"\n"]
        start = cut
    return b"".join(parts) + body[start:]


def timed(count: int) -> float:
    sessions = [f"{n:08x}-5e55-4d1d-9c0d-{n * 7919:012x}" for n in range(count)]
    data = transcript(sessions)
    patterns = build_patterns({"aws_access_key": "AKIA[0-9A-Z]{16}"},
                              {"candidate_id": ["agent-x"], "model": ["model-x"], "session_id": sessions})
    started = time.perf_counter()
    clean, _ = redact_artifacts({"transcript": data}, patterns)
    elapsed = time.perf_counter() - started
    if any(session.encode() in clean["transcript"] for session in sessions):
        raise SystemExit("a session id survived redaction")
    return elapsed


def main() -> None:
    few, many = timed(3), timed(3000)
    rows = [["16 MiB transcript, 3 session ids", f"{few:.1f} s", "baseline", "", ""],
            ["16 MiB transcript, 3,000 session ids", f"{many:.1f} s", f"{many / few:.2f}x", "< 10 s",
             "pass" if many < 10 else "FAIL"]]
    for row in rows:
        print(row, flush=True)
    write_section(
        "redaction", "Redaction (`benchmarks/redaction_bench.py`)",
        ["work", "time", "vs 3 ids", "target", "result"], rows,
        notes=("Secret patterns plus identity strings (candidate id, model, session ids) scrubbed and re-scanned "
               "over one transcript; every session id is printed once in it. One combined matcher for all literal "
               "identity strings (tasks/identity_match.py), so the cost follows the transcript, not the id count."),
    )


if __name__ == "__main__":
    main()
