"""An agent that dies before doing anything useful."""

import sys

sys.stdin.read()
print("starting up...")
raise SystemExit("fatal: tool server unreachable")
