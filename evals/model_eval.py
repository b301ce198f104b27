"""`make eval-model`: the eval with the real local model in the loop, on a small bounded subset.

`python -m evals.model_eval [compaction_eval options] PATH...` starts the local model server (SmolLM2-135M
behind llama-cpp-python, `evals.local_model.serve`) on a free loopback port, or uses the answering server in
SUNDRY_MODEL_BASE_URL, and runs `manage.py compaction_eval` against it with the desk's `openai` summarizer,
the model-written rolling-summary baseline and the outcome questions, all through the same endpoint and
model; the server is stopped when the run ends, whatever its result (a failure, Ctrl-C). The exit status is
compaction_eval's (with `--check`: 1 on a money difference, never on a model summary's misses).

A compaction by a 135M model on a shared core takes tens of seconds, not the desk's production deadline
(10 s): the run gives each one SUNDRY_COMPACTION_DEADLINE_SECONDS (default here 240).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evals.local_model import REPO, LocalModelUnavailable, serve

SLOW_MODEL_SECONDS = "240"


def eval_command(model: str, args: list[str]) -> list[str]:
    """compaction_eval with the model as summarizer, baseline writer and working model (unless given)."""
    argv = [sys.executable, "manage.py", "compaction_eval"]
    if "--summarizer" not in args:
        argv += ["--summarizer", "openai"]
    if "--model" not in args:
        argv += ["--model", model]
    if "--baseline" not in args:
        argv += ["--baseline", "model"]
    if "--outcomes-model" not in args:
        argv += ["--outcomes-model", model]
    return argv + args


def eval_env(base: dict[str, str], model_env: dict[str, str]) -> dict[str, str]:
    env = {**base, **model_env}
    env.setdefault("SUNDRY_COMPACTION_DEADLINE_SECONDS", SLOW_MODEL_SECONDS)
    env.setdefault("SUNDRY_SUMMARIZER_TIMEOUT_SECONDS", SLOW_MODEL_SECONDS)
    env.setdefault("LOG_LEVEL", "WARNING")  # not a line per HTTP request to the model
    return env


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    log = Path(os.environ.get("SUNDRY_MODEL_LOG", str(REPO / "var" / "model-server.log")))
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with serve(log=log) as model:
            print(f"==> the local model {model.model!r} answers on {model.base_url} (log: {log})", flush=True)
            command = eval_command(model.model, args)
            print("==> " + " ".join(command[1:]), flush=True)
            return subprocess.call(command, cwd=REPO, env=eval_env(dict(os.environ), model.env()))
    except LocalModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
