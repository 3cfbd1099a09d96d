"""Running untrusted programs: process supervision, the sandbox, workspaces, the workbench, candidates, pinned programs."""
