"""Reads for the metrics and classes pages: compaction figures per class, and per class and day over a
date range (one query each), for the tables, the SVG charts and the CSV export."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from compaction.costs import costs_by_class
from compaction.models import CompactionEvent
from core.cost import CostSummary, summary_of
from core.vocabulary import CompactionStatus
from tickets.models import TicketClass
from tickets.selectors import refused_attempts_count

DEFAULT_RANGE_DAYS = 14
MAX_RANGE_DAYS = 366


@dataclass(frozen=True)
class DateRange:
    start: date
    end: date  # inclusive

    @classmethod
    def default(cls) -> DateRange:
        today = timezone.localdate()
        return cls(start=today - timedelta(days=DEFAULT_RANGE_DAYS - 1), end=today)

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range((self.end - self.start).days + 1)]


@dataclass(frozen=True)
class ClassMetrics:
    slug: str
    applied: int
    forced: int
    failed: int
    deferred: int
    tokens_saved: int
    cost_usd: Decimal
    avg_latency_ms: float | None
    coverage_misses: int
    # What the replacing compactions saved (core.cost): tokens later working requests did not re-send, at
    # the class's working input price, and one compaction's cost over one working turn's.
    tokens_not_resent: int = 0
    savings_usd: Decimal = Decimal(0)
    compaction_to_turn_ratio: float | None = None

    @property
    def failure_rate(self) -> float | None:
        attempted = self.applied + self.forced + self.failed
        return self.failed / attempted if attempted else None

    @property
    def failure_percent(self) -> float | None:
        rate = self.failure_rate
        return None if rate is None else round(100 * rate, 1)


def _in_range(prefix: str, span: DateRange) -> Q:
    return Q(**{f"{prefix}created_at__date__gte": span.start, f"{prefix}created_at__date__lte": span.end})


def compaction_metrics(span: DateRange | None = None) -> list[ClassMetrics]:
    """Per ticket class, every class listed: compactions by status, tokens saved, summarizer cost,
    latency and coverage misses, over the events of `span` (one query); and what they saved (one more)."""
    event = "tickets__compactions__"
    within = _in_range(event, span) if span else Q()
    replacing = Q(**{f"{event}status__in": CompactionStatus.replacing()}) & within

    def status(value: str) -> Q:
        return Q(**{f"{event}status": value}) & within

    rows = (
        TicketClass.objects.order_by("slug")
        .values("slug")
        .annotate(
            applied=Count(f"{event}pk", filter=status(CompactionStatus.APPLIED)),
            forced=Count(f"{event}pk", filter=status(CompactionStatus.FORCED)),
            failed=Count(f"{event}pk", filter=status(CompactionStatus.FAILED)),
            deferred=Count(f"{event}pk", filter=status(CompactionStatus.DEFERRED)),
            saved=Coalesce(
                Sum(F(f"{event}tokens_before") - F(f"{event}tokens_after"), filter=replacing), Value(0)
            ),
            cost=Coalesce(Sum(f"{event}cost_usd", filter=within), Value(Decimal("0"))),
            latency=Avg(
                f"{event}latency_ms", filter=within & ~Q(**{f"{event}status": CompactionStatus.DEFERRED})
            ),
            misses=Count(f"{event}pk", filter=within & Q(**{f"{event}coverage_missing_count__gt": 0})),
        )
    )
    costs = costs_by_class(CompactionEvent.objects.filter(_in_range("", span) if span else Q()))
    empty = CostSummary(0, Decimal(0), 0, Decimal(0), None)
    saved = {slug: summary_of(c.compactions, c.prices) for slug, c in costs.items()}
    return [
        ClassMetrics(
            tokens_not_resent=saved.get(r["slug"], empty).tokens_not_resent,
            savings_usd=saved.get(r["slug"], empty).savings_usd,
            compaction_to_turn_ratio=saved.get(r["slug"], empty).compaction_to_turn_ratio,
            slug=r["slug"],
            applied=r["applied"],
            forced=r["forced"],
            failed=r["failed"],
            deferred=r["deferred"],
            tokens_saved=int(r["saved"] or 0),
            cost_usd=Decimal(r["cost"] or 0),
            avg_latency_ms=r["latency"],
            coverage_misses=r["misses"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class DayRow:
    day: date
    slug: str
    compactions: int
    failures: int
    misses: int
    tokens_saved: int
    cost_usd: Decimal


# The daily figures, in the order the page charts them and the CSV lists them: (field, title, unit).
DAILY_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("compactions", "Compactions applied or forced", "count"),
    ("failures", "Failed compactions", "count"),
    ("misses", "Compactions with coverage misses", "count"),
    ("tokens_saved", "Tokens saved", "tokens"),
    ("cost_usd", "Summarizer cost", "usd"),
)


def daily_metrics(span: DateRange) -> list[DayRow]:
    """Per class and day (in the desk's timezone), the days with compaction events in `span` (one query)."""
    replacing = Q(status__in=CompactionStatus.replacing())
    rows = (
        CompactionEvent.objects.filter(created_at__date__gte=span.start, created_at__date__lte=span.end)
        .annotate(day=TruncDate("created_at"), slug=F("ticket__ticket_class__slug"))
        .values("day", "slug")
        .annotate(
            compactions=Count("pk", filter=replacing),
            failures=Count("pk", filter=Q(status=CompactionStatus.FAILED)),
            misses=Count("pk", filter=Q(coverage_missing_count__gt=0)),
            saved=Coalesce(Sum(F("tokens_before") - F("tokens_after"), filter=replacing), Value(0)),
            cost=Coalesce(Sum("cost_usd"), Value(Decimal("0"))),
        )
        .order_by("day", "slug")
    )
    return [
        DayRow(
            day=r["day"],
            slug=r["slug"],
            compactions=r["compactions"],
            failures=r["failures"],
            misses=r["misses"],
            tokens_saved=int(r["saved"] or 0),
            cost_usd=Decimal(r["cost"] or 0),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class DailySeries:
    """One figure per class and day, every day of the range present (zero when nothing happened)."""

    key: str
    title: str
    unit: str
    days: list[date]
    classes: list[str]
    values: dict[str, list[float]]  # class slug -> one value per day

    @property
    def total(self) -> float:
        return sum(sum(v) for v in self.values.values())


def daily_series(rows: list[DayRow], span: DateRange) -> list[DailySeries]:
    days = span.days
    index = {d: i for i, d in enumerate(days)}
    classes = sorted({r.slug for r in rows})
    series = []
    for key, title, unit in DAILY_FIGURES:
        values: dict[str, list[float]] = {slug: [0.0] * len(days) for slug in classes}
        for r in rows:
            if r.day in index:
                values[r.slug][index[r.day]] += float(getattr(r, key))
        series.append(DailySeries(key=key, title=title, unit=unit, days=days, classes=classes, values=values))
    return series


def metrics_csv_rows(rows: list[DayRow]) -> list[list[Any]]:
    """The CSV export: a header, then one line per class and day with events."""
    out: list[list[Any]] = [["day", "ticket_class", *(key for key, _t, _u in DAILY_FIGURES)]]
    for r in rows:
        out.append(
            [
                r.day.isoformat(),
                r.slug,
                r.compactions,
                r.failures,
                r.misses,
                r.tokens_saved,
                f"{r.cost_usd:.6f}",
            ]
        )
    return out


def class_table() -> QuerySet[TicketClass]:
    """Budgets per class, with how many tickets each holds (one query)."""
    return TicketClass.objects.annotate(ticket_count=Count("tickets")).order_by("slug")


def refused_attempts_in(span: DateRange) -> int:
    """Refused repeats of irreversible actions over the days of `span` in the desk's timezone (one query)."""
    since = timezone.make_aware(datetime.combine(span.start, time.min))
    until = timezone.make_aware(datetime.combine(span.end + timedelta(days=1), time.min))
    return refused_attempts_count(since, until=until)
