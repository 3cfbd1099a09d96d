"""``tribunal plan freeze``: turn experiment.toml into a pinned plan.

Every mistake is found before anything is written, and reported with the
file and the field it concerns; then case repositories, prompts and
predictions files go into the object store, and the plan itself is stored
and appended to the manifest (txn ``plan:<plan_hash>``, so freezing the same
spec twice records it once).

Those inputs must lie inside the experiment's folder once ``..`` and links
are followed: a spec naming ``/etc`` or ``../../proc/self`` would copy host
files into a store that others read. Reading from elsewhere is possible, but
only as a deliberate choice (``allow_outside``, ``--allow-outside``).
"""

from __future__ import annotations

from pathlib import Path

from registry._archive import archive_tree
from registry._entry import NewEntry
from registry._errors import SpecError
from registry._models import read_toml
from registry._plan import PLAN_SCHEMA, ExperimentSpec, Plan, compute_plan_hash, load_spec, plan_bytes
from registry._predictions import parse_predictions
from registry._registry import Registry

UNSET_HASH = "sha256:" + "0" * 64


def _located(spec_path: Path, field: str, value: str, allow_outside: bool) -> Path:
    """The path a spec field names, resolved against the spec's folder; refused if it leads outside it."""
    base = spec_path.resolve().parent
    path = (base / value).resolve()
    if not allow_outside and not path.is_relative_to(base):
        raise SpecError(
            f"{spec_path}: {field}: {value!r} is outside the experiment directory {base} "
            "(pass --allow-outside to freeze it anyway)"
        )
    return path


def _inputs(spec_path: Path, spec: ExperimentSpec, allow_outside: bool) -> dict[str, Path]:
    """Resolve and check every path the spec names; keys are field locations."""
    found: dict[str, Path] = {}
    for i, case in enumerate(spec.case):
        repo = _located(spec_path, f"case[{i}].repo", case.repo, allow_outside)
        prompt = _located(spec_path, f"case[{i}].prompt", case.prompt, allow_outside)
        if not repo.is_dir():
            raise SpecError(f"{spec_path}: case[{i}].repo: directory {case.repo!r} not found")
        if not prompt.is_file():
            raise SpecError(f"{spec_path}: case[{i}].prompt: file {case.prompt!r} not found")
        found[f"case[{i}].repo"], found[f"case[{i}].prompt"] = repo, prompt
    for i, candidate in enumerate(spec.candidate):
        if candidate.predictions is not None:
            predictions = _located(spec_path, f"candidate[{i}].predictions", candidate.predictions, allow_outside)
            if not predictions.is_file():
                raise SpecError(
                    f"{spec_path}: candidate[{i}].predictions: file {candidate.predictions!r} not found"
                )
            parse_predictions(predictions.read_bytes(), f"{spec_path}: candidate[{i}].predictions")
            found[f"candidate[{i}].predictions"] = predictions
    return found


def freeze_experiment(spec_path: Path, registry: Registry, *, allow_outside: bool = False) -> tuple[Plan, bytes]:
    """Validate, pin and store an experiment; return the plan and its canonical bytes.

    ``allow_outside`` accepts repos, prompts and predictions outside the experiment's folder.
    """
    spec = load_spec(spec_path, read_toml(spec_path))
    paths = _inputs(spec_path, spec, allow_outside)
    cases = [
        {
            "id": case.id,
            "snapshot_digest": registry.put(archive_tree(paths[f"case[{i}].repo"])),
            "prompt_hash": registry.put(paths[f"case[{i}].prompt"].read_bytes()),
            "grader_profile": case.grader_profile,
            "judge": case.judge,
        }
        for i, case in enumerate(spec.case)
    ]
    candidates = [
        {
            "id": candidate.id,
            "kind": candidate.kind,
            "command": candidate.command,
            "predictions_digest": (
                registry.put(paths[f"candidate[{i}].predictions"].read_bytes())
                if candidate.predictions is not None
                else None
            ),
            "provider": candidate.provider,
            "model": candidate.model,
            "network": candidate.network,
            "read_only": candidate.read_only,
        }
        for i, candidate in enumerate(spec.candidate)
    ]
    body: dict[str, object] = {
        "schema_version": PLAN_SCHEMA,
        "experiment": spec.experiment,
        "experiment_dir": str(spec_path.resolve().parent),
        "attempts": spec.attempts,
        "cases": cases,
        "candidates": candidates,
    }
    draft = Plan.model_validate({**body, "plan_hash": UNSET_HASH})
    plan = draft.model_copy(update={"plan_hash": compute_plan_hash(draft.model_dump(mode="json"))})
    data = plan_bytes(plan)
    entry = NewEntry(
        txn=f"plan:{plan.plan_hash}",
        role="plan",
        experiment_id=plan.experiment,
        digest=registry.put(data),
        size=len(data),
    )
    registry.append([entry])
    return plan, data
