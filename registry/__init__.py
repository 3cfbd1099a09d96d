"""Content-addressed registry: canonical records, objects, the append-only manifest.

The public surface is re-exported here; modules starting with ``_`` are internal.
"""

from registry._canonical import canonical_json, digest, digest_json, is_digest
from registry._chain import Finding, Pin
from registry._config import CandidateEnv, Config, GraderProfile, JudgeConfig, RedactionConfig, find_config, load_config
from registry._doctor import DoctorReport, check_registry
from registry._entry import ManifestEntry, NewEntry
from registry._errors import (
    CanonicalJsonError,
    CommitOutcomeUnknown,
    ManifestConflict,
    ManifestCorrupt,
    ObjectCorrupt,
    ObjectMissing,
    PlanDrift,
    RegistryError,
    RegistryRequired,
    SpecError,
    TribunalError,
    UsageError,
)
from registry._freeze import freeze_experiment
from registry._manifest import Head
from registry._plan import AttemptRef, Plan, PlanCandidate, PlanCase, attempt_id, load_plan, plan_bytes
from registry._records import (
    AttemptContract,
    AttemptSummary,
    BlindedContract,
    CandidateResult,
    ExperimentRecord,
    GraderInput,
    GraderReceipt,
    GraderResult,
    ObservedIdentity,
    RedactionReceipt,
    Role,
    TerminalEvidence,
)
from registry._registry import Registry, resolve_registry_url

__all__ = [
    "AttemptContract",
    "AttemptSummary",
    "BlindedContract",
    "CandidateResult",
    "ExperimentRecord",
    "GraderInput",
    "ObservedIdentity",
    "RedactionReceipt",
    "TerminalEvidence",
    "AttemptRef",
    "CandidateEnv",
    "CanonicalJsonError",
    "CommitOutcomeUnknown",
    "Config",
    "DoctorReport",
    "Finding",
    "GraderProfile",
    "GraderReceipt",
    "GraderResult",
    "Head",
    "JudgeConfig",
    "ManifestConflict",
    "ManifestCorrupt",
    "ManifestEntry",
    "NewEntry",
    "ObjectCorrupt",
    "ObjectMissing",
    "Pin",
    "Plan",
    "PlanCandidate",
    "PlanCase",
    "PlanDrift",
    "RedactionConfig",
    "Registry",
    "RegistryError",
    "RegistryRequired",
    "Role",
    "SpecError",
    "TribunalError",
    "UsageError",
    "attempt_id",
    "canonical_json",
    "check_registry",
    "digest",
    "digest_json",
    "find_config",
    "freeze_experiment",
    "is_digest",
    "load_config",
    "load_plan",
    "plan_bytes",
    "resolve_registry_url",
]
