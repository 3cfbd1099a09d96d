"""A correct fixer: repairs the bug the prompt describes."""

import sys

from fixes import CORRECT, apply, report

prompt = sys.stdin.read()
session = report("demo-labs", "fixer-1", 0.002)
changed = apply(CORRECT)
print(f"[{session}] read a {len(prompt)}-character prompt; rewrote {', '.join(changed) or 'nothing'}")
