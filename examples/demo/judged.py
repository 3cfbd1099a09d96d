"""Make the demo experiment judged by a model: `python judged.py TARGET_DIR` (used by `make demo`).

Copies the demo into TARGET_DIR, names the judge `review` in every case and
configures it from the environment: JUDGE_ENDPOINT (an OpenAI-compatible base
URL such as http://127.0.0.1:11434/v1 for Ollama), JUDGE_MODEL (default
"judge") and, if the endpoint needs a key, JUDGE_API_KEY (only the variable's
*name* is written to the config). The rubric is pinned by its SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent


def make_judged(target: Path, endpoint: str, model: str) -> Path:
    """Write the judged copy of the demo; return its experiment.toml."""
    shutil.copytree(DEMO, target, ignore=shutil.ignore_patterns("__pycache__", "judged.py"), dirs_exist_ok=True)
    spec = target / "experiment.toml"
    text = spec.read_text().replace('experiment = "demo"\n', 'experiment = "demo-judged"\n')
    spec.write_text(text.replace('grader_profile = "unit-tests"\n',
                                 'grader_profile = "unit-tests"\njudge = "review"\n'))
    rubric_sha = hashlib.sha256((target / "rubric.md").read_bytes()).hexdigest()
    with open(target / "tribunal.toml", "a") as config:
        config.write(
            '\n[judges.review]\njudge_id = "demo-reviewer"\nversion = "1"\nadapter = "openai-chat"\n'
            f'provider = "local"\nmodel = "{model}"\nrubric = "rubric.md"\nrubric_sha256 = "{rubric_sha}"\n'
            f'endpoint = "{endpoint}"\napi_key_env = "JUDGE_API_KEY"\ntimeout_s = 120\n'
        )
    return spec


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.environ.get("JUDGE_ENDPOINT"):
        raise SystemExit("usage: JUDGE_ENDPOINT=http://host:port/v1 [JUDGE_MODEL=name] python judged.py TARGET_DIR")
    print(make_judged(Path(sys.argv[1]), os.environ["JUDGE_ENDPOINT"], os.environ.get("JUDGE_MODEL", "judge")))
