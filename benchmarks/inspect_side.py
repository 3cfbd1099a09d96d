"""Inspect AI's side of the regrade benchmark; runs in its own venv (inspect-ai is not a tribunal dependency).

``python inspect_side.py make-log N LOG_DIR`` writes one ``.eval`` log of N
samples answered by ``mockllm/model`` (set-up, not timed) and prints its path;
``python inspect_side.py count-scores LOG`` prints how many samples the
re-scored log holds and how many the grader passed, so the benchmark can
refuse a baseline that did less work than tribunal.
The benchmark then times ``inspect score LOG --scorer inspect_side.py@grade_with_subprocess``:
re-scoring the log with a scorer that spawns the same grader as tribunal's
regrade, once per sample, through ``inspect_ai.util.subprocess`` (recipe and
measured figures: shared/notes/inspect.md).
"""

from __future__ import annotations

import json
import os
import sys

from inspect_ai import Task, task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate
from inspect_ai.util import subprocess


@task
def samples(n: int = 1000) -> Task:
    """N trivial samples; their answers only exist to be re-scored."""
    return Task(dataset=[Sample(id=i, input=f"case {i}", target="pass") for i in range(n)], solver=generate())


@scorer(metrics=[accuracy()])
def grade_with_subprocess() -> Scorer:
    """The equivalent of tribunal's executable grader: one grader process per sample, JSON in, JSON out."""
    grader = [os.environ["BENCH_GRADER_PYTHON"], os.environ["BENCH_GRADER"]]

    async def score(state: TaskState, target: Target) -> Score:
        payload = json.dumps({"sample": state.sample_id, "output": state.output.completion, "target": target.text})
        result = await subprocess(grader, input=payload)
        passed = result.success and json.loads(result.stdout).get("passed") is True
        return Score(value=CORRECT if passed else INCORRECT)

    return score


def make_log(n: int, log_dir: str) -> str:
    """Run the initial eval offline and return the log's location."""
    import inspect_ai.model._model as model

    # mockllm counts tokens with a tiktoken encoding it would download; re-scoring never calls the model.
    model.count_text_tokens = lambda text: max(1, len(text) // 4)  # type: ignore[assignment]
    [log] = inspect_eval(samples(n), model="mockllm/model", log_dir=log_dir, display="none")
    if log.status != "success" or not log.samples or len(log.samples) != n:
        raise SystemExit(f"inspect eval did not complete {n} samples: {log.status}")
    return log.location


def count_scores(log_path: str) -> dict[str, int]:
    """How many samples the re-scored log holds, and how many the subprocess scorer marked correct."""
    from inspect_ai.log import read_eval_log

    log = read_eval_log(log_path)
    scores = [(sample.scores or {}).get("grade_with_subprocess") for sample in log.samples or []]
    return {"samples": len(scores), "correct": sum(score is not None and score.value == CORRECT for score in scores)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make-log":
        print(make_log(int(sys.argv[2]), sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "count-scores":
        print(json.dumps(count_scores(sys.argv[2])))
    else:
        raise SystemExit("usage: inspect_side.py make-log N LOG_DIR | count-scores LOG")
