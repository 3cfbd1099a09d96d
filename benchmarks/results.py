"""Write one benchmark's section of benchmarks/RESULTS.md, keeping the others."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = (
    "# Benchmark results\n\n"
    "Written by the scripts in this folder; each section is replaced when its script runs.\n"
)


def write_section(key: str, title: str, columns: list[str], rows: list[list[str]], notes: str) -> None:
    """Replace (or add) the section ``key`` with a Markdown table and notes."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    body = f"<!-- {key} -->\n## {title}\n\nMeasured {stamp}.\n\n" + "\n".join(table) + f"\n\n{notes}\n<!-- /{key} -->\n"
    pattern = re.compile(rf"<!-- {re.escape(key)} -->.*?<!-- /{re.escape(key)} -->\n", re.S)
    text = pattern.sub(lambda _: body, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + body
    RESULTS.write_text(text)
