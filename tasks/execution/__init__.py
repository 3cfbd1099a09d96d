"""Running untrusted programs.

Process supervision, the sandbox, workspaces, the workbench, candidates, pinned programs.
"""
