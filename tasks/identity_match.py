"""Finding a candidate's identity strings in every spelling, in time linear in the text. Pure, no Prefect.

One matcher covers all identity strings of an attempt at once:

* plain: the string itself, any case, not inside a longer alphanumeric word.
  Only letters and digits glue: ``_`` separates like punctuation, so
  ``leaky-model-7_v2`` is the model with a suffix while ``gpt-large2`` is
  another model;
* encoded: every run of text that looks like base64 (standard or URL-safe,
  line-wrapped or not), hex or percent-encoding is decoded -- base64 at each
  of its four character offsets (which covers the string at any of the three
  byte alignments inside the encoded data), hex at both nibble offsets -- and
  the decoded bytes are searched for the strings, any case, glued or not
  (an encoding hides word edges, and a decoded run is not prose). A run whose
  decoding holds an identity string is a hit as a whole: encoded data cannot
  be scrubbed in part.

Why not one regex per string: 3,000 reported session ids over 4 MB of output
cost minutes that way. The strings are compiled into a single alternation
grouped by their first two characters (a shallow trie: the engine checks a
position against the distinct first characters, not against every string,
and no string's length can nest groups deeply), and the decoded runs are
joined and searched in one pass.
"""

from __future__ import annotations

import binascii
import re
from binascii import a2b_base64
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

NOT_WORD_BEFORE = "(?<![A-Za-z0-9])"
NOT_WORD_AFTER = "(?![A-Za-z0-9])"
PERCENT_RUN = re.compile(r"(?<!\S)\S*%[0-9A-Fa-f]{2}\S*")
URL_SAFE = str.maketrans("-_", "+/")
WHITESPACE = re.compile(r"\s+")
PADDING = ("", "", "==", "=")
"""Padding that completes a run of length % 4 == index (1 cannot be completed: its last character is dropped)."""
NEVER = "(?!)"
UNKNOWN_FIELD = "identity"
"""Attribution of a match only Unicode case rules tie to a string (its casefold differs)."""


@dataclass(frozen=True)
class Hit:
    """Where an identity string (of ``field``) was found: the span to replace."""

    start: int
    end: int
    field: str


def _grouped(words: Iterable[str]) -> str:
    """One alternation of ``words`` grouped by first and second character, longest first within a group.

    Longest first makes the longest string at a position win; the grouping
    keeps the work per position near the number of distinct first characters.
    """
    tree: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for word in words:
        tree[word[0]][word[1]].append(word[2:])
    if not tree:
        return NEVER
    firsts = []
    for first, seconds in sorted(tree.items()):
        branches = []
        for second, rests in sorted(seconds.items()):
            tails = "|".join(re.escape(rest) for rest in sorted(rests, key=lambda r: (-len(r), r)))
            branches.append(f"{re.escape(second)}(?:{tails})")
        firsts.append(f"{re.escape(first)}(?:{'|'.join(branches)})")
    return "|".join(firsts)


def _decoders(shortest: int) -> tuple[tuple[re.Pattern[str], Callable[[str], list[bytes]]], ...]:
    """Run finders for an identity string of at least ``shortest`` bytes, each with its decoder.

    Encoding never shortens: n bytes take at least 4n/3 base64 characters
    (any alignment) and 2n hex digits, so shorter runs are never decoded --
    in ordinary output that skips nearly every word. Each run is matched only
    from its first character (the look-behinds), which keeps the search linear.
    """
    base64_run = rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{max(2, 4 * shortest // 3)},}}(?:\r?\n[A-Za-z0-9+/_-]+)*"
    return ((re.compile(base64_run), _base64_decodings),
            (re.compile(rf"(?<![0-9A-Fa-f])[0-9A-Fa-f]{{{2 * shortest},}}"), _hex_decodings),
            (PERCENT_RUN, _percent_decodings))


def _base64_decodings(run: str) -> list[bytes]:
    """The run decoded from each of its first four characters (the data's own start is one of them)."""
    if "\n" in run:
        run = WHITESPACE.sub("", run)
    if "-" in run or "_" in run:
        run = run.translate(URL_SAFE)
    decoded = []
    for part in (run, run[1:], run[2:], run[3:]):
        spare = len(part) % 4
        try:
            decoded.append(a2b_base64(part[:-1] if spare == 1 else part + PADDING[spare]))
        except binascii.Error:
            continue
    return decoded


def _hex_decodings(run: str) -> list[bytes]:
    return [bytes.fromhex(run[offset : offset + (len(run) - offset) // 2 * 2]) for offset in (0, 1)]


def _percent_decodings(run: str) -> list[bytes]:
    plus = [unquote_to_bytes(run.replace("+", " "))] if "+" in run else []
    return [unquote_to_bytes(run), *plus]


class IdentityMatcher:
    """Every identity string of an attempt, plain and encoded, as one matcher."""

    def __init__(self, identity: dict[str, str]) -> None:
        """``identity`` maps each string to the field it came from (``model``, ``session_id``, ...)."""
        self.count = len(identity)
        self._fields = {value.casefold(): field for value, field in identity.items()}
        words = {value.lower() for value in identity}
        self._plain = re.compile(f"{NOT_WORD_BEFORE}(?:{_grouped(words)}){NOT_WORD_AFTER}", re.IGNORECASE)
        encoded = {form for value in identity for form in (value.encode(), value.lower().encode())}
        self._decoders = _decoders(min((len(form) for form in encoded), default=1))
        self._decoded = re.compile(_grouped(w.decode("latin-1") for w in encoded).encode("latin-1"), re.IGNORECASE)

    def field_of(self, matched: str) -> str:
        return self._fields.get(matched.casefold(), UNKNOWN_FIELD)

    def plain_hits(self, text: str) -> list[Hit]:
        """Each plain occurrence, leftmost and longest first, not overlapping."""
        return [Hit(m.start(), m.end(), self.field_of(m.group())) for m in self._plain.finditer(text)]

    def encoded_hits(self, text: str) -> list[Hit]:
        """Each encoded run whose decoding holds an identity string (overlapping runs merged)."""
        if not self.count:
            return []
        spans: list[tuple[int, int]] = []
        chunks: list[bytes] = []
        starts: list[int] = []
        offset = 0
        for pattern, decode in self._decoders:
            for run in pattern.finditer(text):
                for chunk in decode(run.group()):
                    spans.append(run.span())
                    chunks.append(chunk)
                    starts.append(offset)
                    offset += len(chunk) + 1
        hits = []
        for found in self._decoded.finditer(b"\0".join(chunks)):
            start, end = spans[bisect_right(starts, found.start()) - 1]
            hits.append(Hit(start, end, self.field_of(found.group().decode("utf-8", errors="replace"))))
        return _merged(hits)

    def hits(self, text: str) -> list[Hit]:
        """Plain and encoded occurrences (for a re-scan: is anything left?)."""
        return self.plain_hits(text) + self.encoded_hits(text)


def _merged(hits: list[Hit]) -> list[Hit]:
    """Sorted, with overlapping spans joined (a hex run inside a base64 run is one replacement)."""
    merged: list[Hit] = []
    for hit in sorted(hits, key=lambda h: (h.start, -h.end)):
        if merged and hit.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Hit(last.start, max(last.end, hit.end), last.field)
        else:
            merged.append(hit)
    return merged


def replace_hits(text: str, hits: list[Hit], replacement: str) -> tuple[str, dict[str, int]]:
    """Replace non-overlapping, sorted ``hits``; return the text and replacements per field."""
    parts: list[str] = []
    counts: defaultdict[str, int] = defaultdict(int)
    position = 0
    for hit in hits:
        parts += [text[position : hit.start], replacement]
        counts[hit.field] += 1
        position = hit.end
    parts.append(text[position:])
    return "".join(parts), dict(counts)
