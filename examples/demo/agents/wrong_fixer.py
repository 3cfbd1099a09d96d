"""A plausible but wrong fixer: edits the right file, leaves the bug half-fixed."""

import sys

from fixes import WRONG, apply, report

sys.stdin.read()
session = report("demo-labs", "hasty-1", 0.001)
changed = apply(WRONG)
print(f"[{session}] patched {', '.join(changed) or 'nothing'}; looks fine to me")
