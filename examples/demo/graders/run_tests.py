"""Executable grader: run the case's pytest suite on the patched workspace.

Grader protocol (SPEC §10): cwd = the case repo with the retained patch
applied, stdin = canonical grader-input JSON, stdout = one JSON object whose
boolean `passed` is the verdict; everything else is evidence.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from xml.etree import ElementTree

HARNESS = ("conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
           "usercustomize.py")


def harness_edits(patch):
    """Files of the test harness the patch touches: a candidate must not grade itself by editing its tests."""
    paths = {part[2:] for line in patch.splitlines() if line.startswith("diff --git ")
             for part in line.split()[2:4]}
    return sorted(path for path in paths if path.split("/")[-1] in HARNESS or path.split("/")[-1].startswith("test_")
                  or "tests/" in path or path.endswith(".pth"))


grader_input = json.load(sys.stdin)
if not grader_input.get("candidate_succeeded", False):
    print(json.dumps({"passed": False, "reason": "candidate did not complete; nothing to test"}))
    raise SystemExit(0)
edited = harness_edits(grader_input.get("patch", ""))
if edited:
    print(json.dumps({"passed": False, "reason": "the patch edits the test harness", "files": edited}))
    raise SystemExit(0)
scratch = tempfile.mkdtemp()
junit = os.path.join(scratch, "junit.xml")
settings = os.path.join(scratch, "pytest.ini")  # the only configuration pytest reads: none from the workspace
with open(settings, "w") as handle:
    handle.write("[pytest]\n")
# -I: the workspace is not on sys.path at start-up (a planted pytest.py cannot stand in for pytest);
# the verdict comes from pytest's own report, so a module that calls os._exit(0) on import passes nothing.
run = subprocess.run(
    [sys.executable, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header", "--noconftest",
     "-c", settings, "--rootdir", os.getcwd(), f"--junitxml={junit}"],
    capture_output=True,
    text=True,
    timeout=90,
)
# No durations in the evidence: the same input must give the same output bytes (`tribunal doctor --replay`).
tail = [re.sub(r" in [0-9.]+s\b", "", line) for line in (run.stdout + run.stderr).strip().splitlines()[-5:]]
try:
    suites = ElementTree.parse(junit).getroot()
    counts = {key: sum(int(suite.get(key, 0)) for suite in suites.iter("testsuite"))
              for key in ("tests", "failures", "errors", "skipped")}
except (OSError, ElementTree.ParseError):
    counts = None
passed = run.returncode == 0 and counts is not None and counts["tests"] > 0 and counts["failures"] == 0 \
    and counts["errors"] == 0
print(json.dumps({"passed": passed, "pytest_exit": run.returncode, "counts": counts, "summary": tail}))
