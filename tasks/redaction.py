"""Redaction (SPEC §5.2): scrub secrets and the candidate's own identity, then prove it.

Pure functions, no Prefect. Two kinds of patterns run over every retained
text: the operator's configured secret regexes, and the attempt's identity
strings (candidate id, provider, model, session ids, cost) as whole words,
case-insensitive. Identity strings shorter than 4 characters are skipped:
redacting "a1" would shred ordinary text and protect nothing.

After scrubbing, the result is scanned again with every pattern; a surviving
match is a hard stop (``RedactionLeak``) whose message names the pattern and
the artifact, never the matched text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry import TribunalError

MIN_IDENTITY_LENGTH = 4
REPLACEMENT = "[REDACTED]"


class RedactionLeak(TribunalError):
    """A pattern still matches after redaction; nothing of the attempt may be stored."""


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: re.Pattern[str]


def identity_pattern(value: str) -> re.Pattern[str]:
    """Match ``value`` as a whole word (not inside a longer identifier), any case."""
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])", re.IGNORECASE)


def build_patterns(secret_patterns: dict[str, str], identity: dict[str, list[str]]) -> list[Pattern]:
    """Configured secrets first, then identity strings (``identity:<field>``), longest first."""
    patterns = [Pattern(name, re.compile(regex)) for name, regex in sorted(secret_patterns.items())]
    values = sorted(
        {(field, value) for field, items in identity.items() for value in items if len(value) >= MIN_IDENTITY_LENGTH},
        key=lambda item: (-len(item[1]), item),
    )
    patterns += [Pattern(f"identity:{field}", identity_pattern(value)) for field, value in values]
    return patterns


def scrub(text: str, patterns: list[Pattern]) -> tuple[str, dict[str, int]]:
    """Replace every match of every pattern; return the text and replacements per pattern."""
    counts: dict[str, int] = {}
    for pattern in patterns:
        text, replaced = pattern.regex.subn(REPLACEMENT, text)
        if replaced:
            counts[pattern.name] = counts.get(pattern.name, 0) + replaced
    return text, counts


def rescan(artifact: str, text: str, patterns: list[Pattern]) -> None:
    """Raise RedactionLeak if any pattern still matches ``text``."""
    for pattern in patterns:
        if pattern.regex.search(text):
            raise RedactionLeak(
                f"redaction incomplete: pattern {pattern.name!r} still matches the {artifact}; "
                "the attempt was stopped and nothing of it was stored"
            )


def redact_artifacts(artifacts: dict[str, bytes], patterns: list[Pattern]) -> tuple[dict[str, bytes], dict[str, int]]:
    """Scrub and re-scan every artifact; return the clean bytes and the total tally per pattern.

    Artifacts are decoded as UTF-8 with surrogate escapes so binary patches
    round-trip byte for byte where nothing matched.
    """
    clean: dict[str, bytes] = {}
    tally: dict[str, int] = {}
    for name, data in artifacts.items():
        text, counts = scrub(data.decode("utf-8", errors="surrogateescape"), patterns)
        rescan(name, text, patterns)
        clean[name] = text.encode("utf-8", errors="surrogateescape")
        for key, count in counts.items():
            tally[key] = tally.get(key, 0) + count
    return clean, tally
