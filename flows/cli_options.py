"""Options and output helpers shared by the ``tribunal`` commands (``cli.py`` and its command modules)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from registry import Registry, canonical_json, resolve_registry_url

RegistryOption = Annotated[
    str | None,
    typer.Option("--registry", help="Registry root: a directory or s3://bucket/prefix (default: $TRIBUNAL_REGISTRY)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="tribunal.toml (default: $TRIBUNAL_CONFIG, else ./tribunal.toml)."),
]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", min=1, help="Candidate and grader programs run at once."),
]


def open_registry(option: str | None) -> Registry:
    """Open the registry named by ``--registry`` or ``$TRIBUNAL_REGISTRY``."""
    return Registry.open(resolve_registry_url(option))


def print_json(value: object) -> None:
    """Print canonical JSON on stdout (stable for scripts and diffs)."""
    sys.stdout.write(canonical_json(value).decode() + "\n")
