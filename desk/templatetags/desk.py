"""Template filters and tags for the desk's pages: money, times, JSON, labels, bars and charts.

The formatting and the chart geometry live in desk.pages (formatting, labels, charts); these are thin."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html

from desk.pages import charts, formatting
from desk.pages.labels import CATEGORY_LABELS
from desk.pages.metrics import DailySeries
from desk.pages.ticket import ContextSeries

register = template.Library()


@register.filter
def usd_cents(cents: int | None) -> str:
    """4000 -> "$40.00"."""
    return formatting.usd_cents(cents)


@register.filter
def usd(amount: Decimal | float | None) -> str:
    """Dollars at two decimals, sub-cent amounts in cents ("0.076¢")."""
    return formatting.usd(amount)


@register.filter
def when(value: datetime | None) -> str:
    """A <time> with the moment in the desk's timezone and its name."""
    if value is None:
        return "—"
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), formatting.when(value))


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON, as text (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def category_label(key: str) -> str:
    return CATEGORY_LABELS.get(key, key)


@register.simple_tag
def budget_bar(tokens: int, budget: int, threshold: float) -> dict[str, Any]:
    """Geometry and level of a tokens-against-budget bar (drawn in SVG: no inline styles)."""
    share = tokens / budget if budget else 0
    level = "over" if share > 1 else "warn" if share > threshold else "ok"
    return {
        "width": min(100.0, round(share * 100, 1)),
        "mark": round(threshold * 100, 1),
        "level": level,
        "pct": round(share * 100),
    }


@register.inclusion_tag("tickets/_chart.html")
def context_chart(series: ContextSeries, narrow: bool = False) -> dict[str, Any]:
    """The ticket's context chart; `narrow`, the phone's (its own geometry, not the wide one scaled)."""
    if narrow:
        return charts.context_chart(series, **charts.NARROW_CHART) | {"narrow": True}
    return charts.context_chart(series)


@register.inclusion_tag("tickets/_day_chart.html")
def day_chart(series: DailySeries) -> dict[str, Any]:
    return charts.daily_chart(series)
