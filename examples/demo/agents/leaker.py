"""A correct fixer with bad hygiene: it prints a (fake) secret and names itself.

Its transcript and patch must reach the registry and the grader redacted.
"""

import sys
from pathlib import Path

from fixes import CORRECT, apply, report

sys.stdin.read()
session = report("demo-labs", "leaky-model-7", 0.004)
print("using credentials AKIAIOSFODNN7EXAMPLE from the environment")
print(f"hello from leaky-model-7, candidate agent-leaky, session {session}")
changed = apply(CORRECT)
Path("NOTES.md").write_text("Fixed by leaky-model-7 (agent-leaky). Key used: AKIAIOSFODNN7EXAMPLE\n")
print(f"rewrote {', '.join(changed)}")
