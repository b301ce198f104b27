"""`python manage.py check_summary --state STATE.json --summary SUMMARY.json`

One summary against one pinned state (as `GET /api/v1/tickets/{id}/state/` answers it), with the engine's
own coverage check. Prints `{"covered": [{"id": ...}], "missing": [{"id": ..., "why": ...}]}`; exits 0 when
nothing is missing, 1 when something is, 2 on bad input (the message on stderr).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compaction.coverage import check_coverage
from core.summary import Summary

BAD_INPUT = 2
SOMETHING_MISSING = 1


class _Action(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    item: str = ""
    amount_cents: int = Field(default=0, ge=0)
    at_turn: int | None = None
    reversed: bool = False


class _Text(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    at_turn: int | None = None


class _State(BaseModel):
    """The agent-facing pinned state; its other fields (ticket, version, totals) are not checked."""

    model_config = ConfigDict(extra="ignore")

    actions_taken: list[_Action]
    customer_constraints: list[_Text]
    open_questions: list[_Text]
    decisions: list[_Text] = Field(default_factory=list)


def _read_json(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read the {what} file {path}: {exc}", returncode=BAD_INPUT) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(f"the {what} file {path} is not JSON: {exc}", returncode=BAD_INPUT) from exc


def _validate[M: BaseModel](model: type[M], data: Any, path: str, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(top)'}: {error['msg']}" for error in exc.errors()
        )
        raise CommandError(
            f"the {what} file {path} has the wrong shape: {problems}", returncode=BAD_INPUT
        ) from exc


class Command(BaseCommand):
    help = "Check one summary against one pinned state with the engine's coverage check (exit 0, 1 missing, 2 bad input)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--state", required=True, help="the pinned state, as GET .../state/ answers it")
        parser.add_argument(
            "--summary", required=True, help="the summary: the four list fields and narrative"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        state = _validate(_State, _read_json(options["state"], "state"), options["state"], "state")
        summary = _validate(Summary, _read_json(options["summary"], "summary"), options["summary"], "summary")
        report = check_coverage(state.model_dump(mode="json"), summary.model_dump(mode="json"))
        out = {
            "covered": [
                {"id": c["id"], "category": c["category"], "label": c["label"], "by": c["by"]}
                for c in report.covered
            ],
            "missing": [
                {"id": m["id"], "category": m["category"], "label": m["label"], "why": m["why"]}
                for m in report.missing
            ],
        }
        self.stdout.write(json.dumps(out, ensure_ascii=False, indent=2))
        if report.missing:
            raise SystemExit(SOMETHING_MISSING)
