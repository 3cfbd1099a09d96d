"""Executable grader: run the case's pytest suite on the patched workspace.

Grader protocol (SPEC §10): cwd = the case repo with the retained patch
applied, stdin = canonical grader-input JSON, stdout = one JSON object whose
boolean `passed` is the verdict; everything else is evidence.
"""

import json
import subprocess
import sys

grader_input = json.load(sys.stdin)
if not grader_input.get("candidate_succeeded", False):
    print(json.dumps({"passed": False, "reason": "candidate did not complete; nothing to test"}))
    raise SystemExit(0)
run = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header"],
    capture_output=True,
    text=True,
    timeout=90,
)
tail = (run.stdout + run.stderr).strip().splitlines()[-5:]
print(json.dumps({"passed": run.returncode == 0, "pytest_exit": run.returncode, "summary": tail}))
