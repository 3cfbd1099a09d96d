"""What the demo agents know: the repaired source of each demo case.

The agents are stand-ins for real coding agents: each reads the prompt on
stdin, edits files in its working directory (the case checkout), and reports
its identity through $TRIBUNAL_REPORT_FILE, as SPEC §10 asks of a candidate.
"""

import json
import os
import uuid
from pathlib import Path

CORRECT = {
    "mathutil.py": '''"""Small numeric helpers."""


def total(values):
    """Return the sum of all values."""
    result = 0
    for value in values:
        result += value
    return result
''',
    "textutil.py": '''"""Text helpers for URLs."""

import re


def slugify(text):
    """Return a lowercase URL slug: words joined by single hyphens, punctuation dropped."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)
''',
}

WRONG = {
    "mathutil.py": '''"""Small numeric helpers."""


def total(values):
    """Return the sum of all values."""
    result = 0
    for i in range(1, len(values)):
        result += values[i]
    return result
''',
    "textutil.py": '''"""Text helpers for URLs."""


def slugify(text):
    """Return a lowercase URL slug: words joined by single hyphens, punctuation dropped."""
    return text.strip().lower().replace(" ", "-")
''',
}


def apply(fixes: dict[str, str]) -> list[str]:
    """Rewrite whichever known files exist in the working directory; return their names."""
    changed = []
    for name, source in fixes.items():
        path = Path(name)
        if path.exists():
            path.write_text(source)
            changed.append(name)
    return changed


def report(provider: str, model: str, cost_usd: float) -> str:
    """Write the observed identity to $TRIBUNAL_REPORT_FILE; return the session id."""
    session_id = f"sess-{uuid.uuid4().hex[:12]}"
    target = os.environ.get("TRIBUNAL_REPORT_FILE")
    if target:
        Path(target).write_text(
            json.dumps({"provider": provider, "model": model, "session_id": session_id, "cost_usd": cost_usd})
        )
    return session_id
