"""Unsandboxed runs are never mistaken for sandboxed ones (SPEC §11): reports, publish, doctor, set-up errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from registry import GraderReceipt, Registry, Role
from registry._objects import object_key
from tests.helpers import copy_demo, tribunal


def test_backend_none_marks_every_number_unisolated_and_publish_holds(tmp_path: Path, cli_env: dict[str, str],
                                                                       raw: Any) -> None:
    """Attack: a registry graded without walls must not pass as one graded behind them."""
    spec = copy_demo(tmp_path / "exp")
    config = spec.parent / "tribunal.toml"
    config.write_text(config.read_text() + '\n[sandbox]\nbackend = "none"\n')
    plan, registry = tmp_path / "plan.json", str(tmp_path / "reg")
    assert tribunal("plan", "freeze", str(spec), "-o", str(plan), "--registry", registry, env=cli_env).returncode == 0
    ran = tribunal("run", "--plan", str(plan), "--registry", registry, "--config", str(config), env=cli_env)
    assert ran.returncode == 0, ran.stderr

    def report(*extra: str) -> Any:
        return tribunal("report", "--plan", str(plan), "--registry", registry, *extra, env=cli_env)

    body = json.loads(report("--format", "json").stdout)
    assert body["summary"]["unisolated"] == 10 and not any(a["isolated"] for a in body["attempts"])
    assert all(tally["unisolated"] == 2 for tally in body["summary"]["candidates"].values())
    assert "(unisolated)" in report("--format", "md").stdout and "(unisolated)" in report().stdout
    held = report("--publish", "--config", str(config))
    assert held.returncode == 1 and "not published: audit decision hold" in held.stderr
    assert "10 attempts ran without a sandbox" in held.stderr

    store = Registry.open(registry)
    receipt = store.load(store.entries(role=Role.GRADER_RECEIPT.value)[0].digest, GraderReceipt)
    assert receipt.sandbox_profile is not None
    raw(store).delete(object_key(receipt.sandbox_profile))
    doctor = tribunal("doctor", "--plan", str(plan), "--registry", registry, env=cli_env)
    assert doctor.returncode == 1 and "sandbox-profile-missing" in doctor.stdout


def test_a_machine_without_bubblewrap_gets_a_clear_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Without bwrap on PATH, run says how to install it or opt out -- no traceback, nothing runs."""
    spec = copy_demo(tmp_path / "exp")
    plan, registry = tmp_path / "plan.json", str(tmp_path / "reg")
    assert tribunal("plan", "freeze", str(spec), "-o", str(plan), "--registry", registry, env=cli_env).returncode == 0
    env = {**cli_env, "PATH": str(Path(sys.executable).parent)}
    ran = tribunal("run", "--plan", str(plan), "--registry", registry, "--config", str(spec.parent / "tribunal.toml"),
                   env=env)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert "bubblewrap (bwrap) is not installed" in ran.stderr and 'backend = "none"' in ran.stderr
    assert Registry.open(registry).entries(role=Role.CANDIDATE_RESULT.value) == []
