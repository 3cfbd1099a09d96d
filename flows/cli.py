"""The ``tribunal`` command line: parse, call one library function, render.

Read-only commands (``plan freeze``, ``doctor``) call plain functions and do
not import Prefect, so they answer in about a second. Every ``TribunalError``
is caught once in ``main``: its message is printed and the process exits with
its code (1 refusal or findings, 2 usage) -- never a traceback for a user's
mistake.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from registry import (
    DoctorReport,
    Pin,
    Registry,
    TribunalError,
    UsageError,
    canonical_json,
    check_registry,
    freeze_experiment,
    is_digest,
    load_plan,
    resolve_registry_url,
)

app = typer.Typer(
    name="tribunal",
    help="Blinded, governed grading of coding-agent output.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
plan_app = typer.Typer(help="Freeze experiments into plans.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

RegistryOption = Annotated[
    str | None,
    typer.Option("--registry", help="Registry root: a directory or s3://bucket/prefix (default: $TRIBUNAL_REGISTRY)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def open_registry(option: str | None) -> Registry:
    """Open the registry named by ``--registry`` or ``$TRIBUNAL_REGISTRY``."""
    return Registry.open(resolve_registry_url(option))


def print_json(value: object) -> None:
    """Print canonical JSON on stdout (stable for scripts and diffs)."""
    sys.stdout.write(canonical_json(value).decode() + "\n")


def parse_pin(text: str) -> Pin:
    """Parse ``SEQ:HASH`` as printed by doctor (``12:sha256:ab...``)."""
    seq, _, entry_hash = text.partition(":")
    if not seq.isdigit() or not is_digest(entry_hash):
        raise UsageError(f"--pin {text!r}: expected SEQ:sha256:<64 hex>, as doctor prints the head")
    return Pin(seq=int(seq), entry_hash=entry_hash)


@plan_app.command("freeze")
def plan_freeze(
    spec: Annotated[Path, typer.Argument(help="experiment.toml to freeze.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write plan.json.")],
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Validate experiment.toml, pin its inputs in the registry, write plan.json."""
    store = open_registry(registry)
    plan, data = freeze_experiment(spec, store)
    try:
        output.write_bytes(data)
    except OSError as error:
        raise UsageError(f"{output}: cannot write the plan ({error.strerror})") from None
    summary = {
        "experiment": plan.experiment,
        "plan_hash": plan.plan_hash,
        "plan": str(output),
        "cases": len(plan.cases),
        "candidates": len(plan.candidates),
        "attempts": sum(1 for _ in plan.attempt_refs()),
    }
    if as_json:
        print_json(summary)
        return
    out.print(
        f"froze [bold]{plan.experiment}[/]: {summary['cases']} cases x {summary['candidates']} candidates "
        f"x {plan.attempts} = {summary['attempts']} attempts"
    )
    out.print(f"plan_hash {plan.plan_hash} -> {output}")


@app.command()
def doctor(
    registry: RegistryOption = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="Also re-validate this plan's hash.")] = None,
    pin: Annotated[
        list[str] | None, typer.Option("--pin", help="A head recorded elsewhere, SEQ:HASH (repeatable).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Verify the manifest chain, every object and every segment; exit 1 on any finding."""
    pins = [parse_pin(text) for text in pin or []]
    if plan is not None:
        load_plan(plan)
    store = open_registry(registry)
    with err.status("checking the registry..."):
        report = check_registry(store, pins)
    if as_json:
        print_json({**report.model_dump(mode="json"), "clean": report.clean})
    else:
        render_doctor(report)
    if not report.clean:
        raise typer.Exit(1)


def render_doctor(report: DoctorReport) -> None:
    """Print a doctor report as a summary line, the head to pin, and a findings table."""
    out.print(
        f"{report.registry}: {report.commits} commits, {report.entries} entries, "
        f"{report.segments} segments, {report.objects} objects"
    )
    if report.head is not None:
        out.print(f"head: {report.head.seq}:{report.head.entry_hash}  (record it; pass it back with --pin)")
    if report.clean:
        out.print("[green]clean[/]: no findings")
        return
    table = Table("kind", "where", "finding", title=f"{len(report.findings)} findings")
    for finding in report.findings:
        where = (
            f"seq {finding.seq}" if finding.seq is not None
            else f"commit {finding.version}" if finding.version is not None
            else finding.digest or ""
        )
        table.add_row(finding.kind, where, finding.message)
    out.print(table)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning TribunalError into a message and exit code."""
    try:
        app(args=argv, prog_name="tribunal")
    except TribunalError as error:
        err.print(f"[red]error:[/] {escape(str(error))}", highlight=False)
        raise SystemExit(error.exit_code) from None


if __name__ == "__main__":
    main()
