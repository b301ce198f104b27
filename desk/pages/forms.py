"""HTML form input: the supervisor's state correction, the queue filters and position, the replay
picker, a compaction review and the metrics' date range."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from compaction.models import ReviewVerdict
from compaction.reviews import COMMENT_MAX_CHARS
from core.vocabulary import StateOp
from desk.pages.metrics import MAX_RANGE_DAYS, DateRange
from desk.pages.queue import QUEUE_SORTS, QueueFilters, QueueFlag, QueuePosition, parse_cursor
from desk.pages.ticket.actions import action_targets
from tickets.models import TicketStatus

# What each correction asks for, besides the reason and the version it was rendered from.
CORRECTION_FIELDS: dict[str, tuple[str, ...]] = {
    StateOp.ACTION_ADDED: ("tool", "item", "amount", "at_turn", "reversible"),
    StateOp.ACTION_REVERSED: ("target_id",),
    StateOp.CONSTRAINT_STATED: ("text", "at_turn"),
    StateOp.CONSTRAINT_EDITED: ("target_id", "text"),
    StateOp.QUESTION_OPENED: ("text", "at_turn"),
    StateOp.QUESTION_RESOLVED: ("target_id",),
    StateOp.DECISION_MADE: ("text", "at_turn"),
}
CORRECTION_TITLES: dict[str, str] = {
    StateOp.ACTION_ADDED: "Add a missed action",
    StateOp.ACTION_REVERSED: "Mark an action reversed",
    StateOp.CONSTRAINT_STATED: "Add a constraint",
    StateOp.CONSTRAINT_EDITED: "Edit a constraint",
    StateOp.QUESTION_OPENED: "Open a question",
    StateOp.QUESTION_RESOLVED: "Resolve a question",
    StateOp.DECISION_MADE: "Add a decision",
}
REQUIRED_BY_OP: dict[str, tuple[str, ...]] = {
    StateOp.ACTION_ADDED: ("tool",),
    StateOp.ACTION_REVERSED: ("target_id",),
    StateOp.CONSTRAINT_STATED: ("text",),
    StateOp.CONSTRAINT_EDITED: ("target_id", "text"),
    StateOp.QUESTION_OPENED: ("text",),
    StateOp.QUESTION_RESOLVED: ("target_id",),
    StateOp.DECISION_MADE: ("text",),
}
# What a dropped passage can be pinned as, from the review page (`core.passages.PIN_KINDS`).
PIN_TITLES: dict[str, str] = {
    StateOp.ACTION_ADDED: "a missed action",
    StateOp.QUESTION_OPENED: "an open question",
    StateOp.CONSTRAINT_STATED: "a constraint",
    StateOp.DECISION_MADE: "a decision",
}


# The corrections that name an action: typed by its id (a state may hold thousands), with the newest offered.
ACTION_TARGET_OPS: tuple[str, ...] = (StateOp.ACTION_REVERSED,)


class DatalistInput(forms.TextInput):
    """A text input with a <datalist> of suggestions (value, label): any value can be typed, and the
    form or the service decides whether it names something."""

    def __init__(self, options: list[tuple[str, str]], attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.options = options

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        widget_attrs = context["widget"]["attrs"]
        widget_attrs["list"] = f"{widget_attrs.get('id') or name}-options"
        return context

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        list_id = f"{(attrs or {}).get('id') or self.attrs.get('id') or name}-options"
        options = format_html_join("", '<option value="{}">{}</option>', self.options)
        return format_html(
            '{}<datalist id="{}">{}</datalist>',
            super().render(name, value, attrs, renderer),
            list_id,
            options,
        )


class CorrectionForm(forms.Form):
    """One correction of the pinned state. The reason is required; the version is the one the form
    was rendered from, so a change made meanwhile is refused instead of overwritten."""

    op = forms.ChoiceField(
        choices=[(op, CORRECTION_TITLES[op]) for op in CORRECTION_FIELDS], widget=forms.HiddenInput
    )
    expected_version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    target_id = forms.CharField(required=False, max_length=20, label="Item")
    text = forms.CharField(required=False, max_length=2000, label="Text")
    tool = forms.CharField(
        required=False,
        max_length=100,
        label="Tool",
        widget=forms.TextInput(attrs={"placeholder": "issue_refund"}),
    )
    item = forms.CharField(
        required=False,
        max_length=200,
        label="Item",
        widget=forms.TextInput(attrs={"placeholder": "garden-table"}),
    )
    amount = forms.DecimalField(
        required=False, min_value=Decimal("0"), max_digits=10, decimal_places=2, label="Amount (USD)"
    )
    at_turn = forms.IntegerField(required=False, min_value=1, label="At turn")
    reversible = forms.BooleanField(required=False, label="Reversible")
    reason = forms.CharField(
        max_length=2000,
        label="Reason",
        widget=forms.TextInput(attrs={"placeholder": "Why this correction (required)"}),
        error_messages={"required": "A reason is required for every correction."},
    )

    def __init__(
        self, *args: Any, targets: dict[str, list[tuple[str, str]]] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("label_suffix", "")
        data = args[0] if args else kwargs.get("data")
        op = (data or {}).get("op") or (kwargs.get("initial") or {}).get("op")
        op = op if op in CORRECTION_FIELDS else "correction"
        # Five of these forms share the page: ids per op keep each label tied to its own input.
        kwargs.setdefault("auto_id", f"id_{op}_%s")
        super().__init__(*args, **kwargs)
        choices = (targets or {}).get(str(op), [])
        if op in ACTION_TARGET_OPS:
            self.fields["target_id"].widget = DatalistInput(
                choices,
                attrs={
                    "placeholder": "A12",
                    "autocomplete": "off",
                    "spellcheck": "false",
                    "size": 8,
                    "title": "The action's id (the newest are suggested; any other can be typed)",
                },
            )
            self.fields["target_id"].label = "Action"
        else:
            self.fields["target_id"].widget = forms.Select(choices=[("", "choose…"), *choices])
        self.fields["at_turn"].widget.attrs.update({"min": 1, "style": "width:5em"})

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        op = cleaned.get("op")
        for name in REQUIRED_BY_OP.get(str(op), ()):
            value = cleaned.get(name)
            if value in (None, "") and name not in self.errors:
                self.add_error(name, "This field is required for this correction.")
        return cleaned

    def service_arguments(self) -> dict[str, Any]:
        """Keyword arguments for `tickets.services.correct_state` (besides ticket and actor)."""
        data = self.cleaned_data
        amount = data.get("amount") or Decimal("0")
        return {
            "op": data["op"],
            "expected_version": data["expected_version"],
            "reason": data["reason"],
            "target_id": data.get("target_id") or "",
            "text": data.get("text") or "",
            "tool": data.get("tool") or "",
            "item": data.get("item") or "",
            "amount_cents": int((amount * 100).to_integral_value()),
            "at_turn": data.get("at_turn"),
            "reversible": bool(data.get("reversible")),
        }

    def field_names(self) -> tuple[str, ...]:
        op = self.data.get("op") if self.is_bound else self.initial.get("op")
        return CORRECTION_FIELDS.get(str(op), ())


class PinForm(CorrectionForm):
    """A passage the compaction dropped, pinned from the review page: the same correction (same view, same
    service, same audit), with its kind a choice the supervisor can change and the passage and its turn
    filled in. `key` tells the passage's form from the others on the page."""

    def __init__(self, *args: Any, key: str, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", f"id_pin_{key}_%s")
        super().__init__(*args, **kwargs)
        op = self.fields["op"]
        op.widget = forms.Select(choices=[(o, f"Pin as {t}") for o, t in PIN_TITLES.items()])
        op.label = "Pin as"
        self.fields["text"].widget = forms.Textarea(attrs={"rows": 2})
        self.fields["text"].help_text = "For a missed action the tool, item and amount are what is pinned."
        self.fields["reason"].widget.attrs["placeholder"] = "Why pin this (required)"

    PIN_FIELDS = ("op", "text", "tool", "item", "amount", "at_turn")

    @property
    def pin_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.PIN_FIELDS]


def pin_form(
    *, key: str, kind: str, text: str, turn: int | None, version: int, tool: str, amount_cents: int | None
) -> PinForm:
    """The correction a dropped passage opens, pre-filled with the passage and its turn."""
    initial: dict[str, Any] = {"op": kind, "expected_version": version, "text": text, "at_turn": turn}
    if tool:
        initial["tool"] = tool
    if amount_cents:
        initial["amount"] = Decimal(amount_cents) / 100
    return PinForm(initial=initial, key=key)


@dataclass(frozen=True)
class CorrectionPanel:
    op: str
    title: str
    form: CorrectionForm

    @property
    def fields(self) -> list[forms.BoundField]:
        return [self.form[name] for name in self.form.field_names()]

    @property
    def open(self) -> bool:
        return self.form.is_bound


def correction_targets(state: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """The items each correction can name, from the agent-facing state: every constraint and open question,
    and the newest actions not yet reversed (an action is typed by its id: `action_targets`)."""
    actions = action_targets(state)
    constraints = [(c["id"], f"{c['id']} {c['text']}") for c in state.get("customer_constraints", [])]
    questions = [(q["id"], f"{q['id']} {q['text']}") for q in state.get("open_questions", [])]
    return {
        StateOp.ACTION_REVERSED: actions,
        StateOp.CONSTRAINT_EDITED: constraints,
        StateOp.QUESTION_RESOLVED: questions,
    }


def correction_panels(
    state: dict[str, Any], *, bound: CorrectionForm | None = None, version: int | None = None
) -> list[CorrectionPanel]:
    """One small form per correction, each rendered from the current version; `bound` replaces its op's."""
    targets = correction_targets(state)
    current = version if version is not None else int(state.get("version", 1))
    panels = []
    for op, title in CORRECTION_TITLES.items():
        if bound is not None and bound.data.get("op") == op:
            form = bound
        else:
            form = CorrectionForm(
                initial={"op": op, "expected_version": current}, targets=targets, prefix=None
            )
        panels.append(CorrectionPanel(op=op, title=title, form=form))
    return panels


class QueueFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=64,
        label="Search",
        widget=forms.SearchInput(attrs={"placeholder": "Ticket or order id  ( / )", "data-search": ""}),
    )
    ticket_class = forms.ChoiceField(required=False, label="Class")
    status = forms.ChoiceField(
        required=False, choices=[("", "Any status"), *TicketStatus.choices], label="Status"
    )
    flags = forms.MultipleChoiceField(
        required=False, choices=QueueFlag.choices, widget=forms.CheckboxSelectMultiple, label="Flags"
    )
    sort = forms.ChoiceField(
        required=False,
        choices=[("recent", "Newest"), ("tokens", "Most tokens"), ("turns", "Most turns")],
        label="Sort",
    )

    def __init__(self, *args: Any, class_slugs: list[str], **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        class_field = self.fields["ticket_class"]
        assert isinstance(class_field, forms.ChoiceField)
        class_field.choices = [("", "Any class"), *((s, s) for s in class_slugs)]

    def active_count(self) -> int:
        """How many filters narrow the queue (a class, a status, each flag): the count the phone's
        collapsed "Filters (n active)" shows. The search box stays in view and is not counted."""
        filters = self.filters()
        return bool(filters.ticket_class) + bool(filters.status) + len(filters.flags)

    def filters(self) -> QueueFilters:
        if not self.is_valid():
            return QueueFilters()
        data = self.cleaned_data
        sort = data.get("sort") or "recent"
        return QueueFilters(
            q=data.get("q") or "",
            ticket_class=data.get("ticket_class") or "",
            status=data.get("status") or "",
            flags=tuple(data.get("flags") or ()),
            sort=sort if sort in QUEUE_SORTS else "recent",
        )


class QueuePositionForm(forms.Form):
    """Where the queue's page starts: `after` or `before` a cursor, or `last`. A cursor that is not
    one of the sort's cursors (garbage, or one from another sort) gives the first page."""

    after = forms.CharField(required=False, max_length=40)
    before = forms.CharField(required=False, max_length=40)
    last = forms.BooleanField(required=False)

    def position(self, sort: str) -> QueuePosition:
        if not self.is_valid():
            return QueuePosition()
        data = self.cleaned_data
        if data.get("last"):
            return QueuePosition(last=True)
        if after := parse_cursor(data.get("after") or "", sort):
            return QueuePosition(after=after)
        if before := parse_cursor(data.get("before") or "", sort):
            return QueuePosition(before=before)
        return QueuePosition()


class ReplayForm(forms.Form):
    turn = forms.IntegerField(min_value=1, label="Turn")

    def __init__(self, *args: Any, turn_count: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["turn"]
        field.validators.append(MaxValueValidator(turn_count, message=f"This ticket has {turn_count} turns."))
        field.widget.attrs.update({"min": 1, "max": turn_count})


class StatusForm(forms.Form):
    """A supervisor moves a ticket: escalate it, park it as waiting, resolve or reopen it."""

    status = forms.ChoiceField(choices=TicketStatus.choices, label="Status")
    reason = forms.CharField(max_length=500, label="Reason", strip=True)

    def error_text(self) -> str:
        """One plain sentence for the 400: which field is wrong and how to fix it."""
        parts = []
        if "status" in self.errors:
            parts.append(f"Unknown status: choose one of {', '.join(TicketStatus.values)}.")
        if "reason" in self.errors:
            parts.append(
                "A reason is required: say why the ticket's status changes (at most 500 characters)."
            )
        return " ".join(parts) or "Bad status change."


class ReviewForm(forms.Form):
    """A supervisor's verdict on a compaction; the service says when a comment is required."""

    verdict = forms.ChoiceField(choices=ReviewVerdict.choices, widget=forms.RadioSelect, label="Verdict")
    comment = forms.CharField(
        required=False,
        max_length=COMMENT_MAX_CHARS,
        label="Comment",
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What was wrong, or what you checked"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class MetricsRangeForm(forms.Form):
    """The metrics' date range: both ends inclusive, at most a year; the last two weeks by default."""

    start = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        default = DateRange.default()
        start = cleaned.get("start")
        end = cleaned.get("end") or (start + (default.end - default.start) if start else default.end)
        start = start or end - (default.end - default.start)
        if start > end:
            raise forms.ValidationError("The range starts after it ends.")
        if (end - start) >= timedelta(days=MAX_RANGE_DAYS):
            raise forms.ValidationError(f"Choose at most {MAX_RANGE_DAYS} days.")
        cleaned["range"] = DateRange(start=start, end=end)
        return cleaned

    def date_range(self) -> DateRange:
        return self.cleaned_data["range"] if self.is_valid() else DateRange.default()


# The largest value a cursor may carry: the columns it is compared with are 32-bit.
CURSOR_MAX = 2**31 - 1


class TicketWindowForm(forms.Form):
    """Which part of a long ticket its page shows: a window of turns (`turn`, `before` or `after`), and
    the older pages of the audit trail (`audit_before`, a state version) and of the status changes
    (`status_before`, a status change's id). All optional; a number past the ticket's end is the window
    at that end (see `timeline_window`); anything but a positive whole number is a 400."""

    turn = forms.IntegerField(min_value=1, max_value=CURSOR_MAX, required=False)
    before = forms.IntegerField(min_value=1, max_value=CURSOR_MAX, required=False)
    after = forms.IntegerField(min_value=0, max_value=CURSOR_MAX, required=False)
    audit_before = forms.IntegerField(min_value=1, max_value=CURSOR_MAX, required=False)
    status_before = forms.IntegerField(min_value=1, max_value=CURSOR_MAX, required=False)
    # What the compactions saved, on the page itself however long the ticket (see ticket_page).
    savings = forms.BooleanField(required=False)

    def window_arguments(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name) for name in self.fields}

    def error_text(self) -> str:
        names = ", ".join(f"{name}={self.data.get(name, '')!r}" for name in self.errors)
        cursors = ", ".join(name for name, f in self.fields.items() if isinstance(f, forms.IntegerField))
        return f"Bad page of the ticket ({names}): each of {cursors} is a whole number of 1 or more."


class LiveMarksForm(forms.Form):
    """The marks a ticket page was drawn with, sent back by its live poll: its newest turn, compaction
    number and refused attempt id (0 when it had none). Anything but a whole number of 0 or more is a 400."""

    turn = forms.IntegerField(min_value=0, max_value=CURSOR_MAX)
    compaction = forms.IntegerField(min_value=0, max_value=CURSOR_MAX)
    refused = forms.IntegerField(min_value=0, max_value=CURSOR_MAX)

    def cleaned_marks(self) -> dict[str, int]:
        return {name: int(self.cleaned_data[name]) for name in self.fields}

    def error_text(self) -> str:
        names = ", ".join(f"{name}={self.data.get(name, '')!r}" for name in self.errors)
        return f"Bad live marks ({names}): turn, compaction and refused are whole numbers of 0 or more."
