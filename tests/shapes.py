"""SPEC §16's machine-readable shapes as strict models: what scripts and CI read from tribunal's JSON.

Every key §16 shows is required with its type (strict: an int is not a
float's string, a list is not an object); a key tribunal adds beside them is
allowed, since §16 says the outputs *add* these keys. A key removed, renamed
or retyped fails validation. Outputs are validated as JSON text, the way a
script reads them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Rate = Annotated[float, Field(ge=0, le=1)]
Interval = tuple[Rate, Rate]
Count = Annotated[int, Field(ge=0)]
TerminalClass = Literal["resolved", "candidate_failure", "harness_invalid", "grader_failure", "judge_failure",
                        "redaction_refused"]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


class CandidateLine(Shape):
    candidate_id: str
    planned: Count
    resolved: Count
    unmeasured: Count
    classes: dict[TerminalClass, Count]
    pass_rate: Rate | None
    interval: Interval | None
    interval_method: Literal["wilson", "cluster-bootstrap"]
    pass_at_k: dict[str, Rate] | None = None
    pass_hat_k: dict[str, Rate] | None = None

    @model_validator(mode="after")
    def _counts_add_up(self) -> CandidateLine:
        assert self.resolved == self.classes.get("resolved", 0), "resolved is the resolved class"
        assert sum(self.classes.values()) + self.unmeasured == self.planned, "classes + unmeasured = planned"
        if self.interval_method == "cluster-bootstrap":  # several attempts per case: pass@k and pass^k
            assert self.pass_at_k and self.pass_hat_k is not None, "cluster-bootstrap lines carry pass@k and pass^k"
        return self


class Excluded(Shape):
    case_id: str
    reason: str


class Slice(Shape):
    rule: Literal["all", "validated"]
    admitted: Count
    total: Count
    excluded: list[Excluded]


class Coordinates(Shape):
    estimand: str
    task_law: str
    evaluation_law: str
    artifact_revision: dict[str, str]
    inference_protocol: str
    evaluator_version: dict[str, str]
    sample_rule: str
    failure_policy: str


class Report(Shape):
    """``tribunal report --format json``: beside ``attempts``, the candidates, the slice and the coordinates."""

    generated_at: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")]
    attempts: list[dict[str, Any]]
    candidates: list[CandidateLine]
    slice: Slice
    coordinates: Coordinates


class Discordant(Shape):
    case_id: str
    index: Count
    a: TerminalClass
    b: TerminalClass


class Paired(Shape):
    """``tribunal report --paired A B --format json``."""

    a: str
    b: str
    items: Count
    both: Count
    neither: Count
    a_only: Count
    b_only: Count
    mcnemar_p: Rate
    difference: Annotated[float, Field(ge=-1, le=1)] | None
    interval: tuple[float, float] | None
    discordant: list[Discordant]

    @model_validator(mode="after")
    def _counts_add_up(self) -> Paired:
        assert self.both + self.neither + self.a_only + self.b_only == self.items, "the four cells make the items"
        assert len(self.discordant) == self.a_only + self.b_only, "every discordant item is listed"
        return self


class ValidatedCase(Shape):
    case_id: str
    status: Literal["valid", "flaky", "broken", "vacuous", "no-gold"]
    gold_passed: Count
    repeat: Count
    empty_passed: bool


class Validation(Shape):
    """``tribunal validate --json``."""

    cases: list[ValidatedCase]


class NightRate(Shape):
    candidate_id: str
    pass_rate: Rate | None
    interval: Interval | None


class Night(Shape):
    label: str
    plan_hash: Digest
    revisions: dict[str, str]
    regression: bool | None
    candidates: list[NightRate]


class Series(Shape):
    """``tribunal series NAME --format json``."""

    series: str
    nights: list[Night]


def shaped(model: type[Shape], body: Any) -> Shape:
    """``body`` read as a script reads tribunal's stdout: validated from its JSON text."""
    return model.model_validate_json(json.dumps(body))
