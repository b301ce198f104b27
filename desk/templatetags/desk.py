"""Formatting for the desk's pages, and the context-size chart drawn as server-side SVG."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import template

from desk.pages.selectors import CATEGORY_LABELS, ContextSeries

register = template.Library()


@register.filter
def usd_cents(cents: int | None) -> str:
    """4000 -> "$40.00"."""
    return f"${(cents or 0) / 100:,.2f}"


@register.filter
def usd(amount: Decimal | float | None, places: int = 4) -> str:
    return f"${Decimal(amount or 0):,.{places}f}"


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON, as text (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def category_label(key: str) -> str:
    return CATEGORY_LABELS.get(key, key)


@register.filter
def percent(part: int | float | None, whole: int | float | None) -> float:
    if not whole:
        return 0.0
    return round(100 * float(part or 0) / float(whole), 1)


@register.simple_tag
def budget_bar(tokens: int, budget: int, threshold: float) -> dict[str, Any]:
    """Geometry and level of a tokens-against-budget bar."""
    share = tokens / budget if budget else 0
    level = "over" if share > 1 else "warn" if share > threshold else "ok"
    return {
        "width": min(100.0, round(share * 100, 1)),
        "mark": round(threshold * 100, 1),
        "level": level,
        "pct": round(share * 100),
    }


CHART_WIDTH = 960
CHART_HEIGHT = 240
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 16, 14, 30


@register.inclusion_tag("tickets/_chart.html")
def context_chart(series: ContextSeries) -> dict[str, Any]:
    """The assembled context size after each turn, with the threshold and budget lines.

    A compaction shows as a vertical drop at its turn: from the size before it to the size after.
    """
    points = series.points
    plot_w = CHART_WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = CHART_HEIGHT - PAD_TOP - PAD_BOTTOM
    top = max(series.token_budget, series.peak, 1) * 1.08
    count = len(points)

    def x(turn: int) -> float:
        return round(PAD_LEFT + (plot_w * (turn - 1) / (count - 1) if count > 1 else plot_w / 2), 1)

    def y(tokens: float) -> float:
        return round(PAD_TOP + plot_h * (1 - tokens / top), 1)

    path: list[str] = []
    dots = []
    drops = []
    for p in points:
        path.append(f"{'M' if not path else 'L'}{x(p.turn)},{y(p.before)}")
        if p.after != p.before:
            path.append(f"L{x(p.turn)},{y(p.after)}")
        over = p.before > series.threshold_tokens
        dots.append(
            {
                "x": x(p.turn),
                "y": y(p.before),
                "turn": p.turn,
                "tokens": p.before,
                "after": p.after,
                "over": over,
            }
        )
        if p.compaction_number is not None:
            drops.append(
                {
                    "x": x(p.turn),
                    "y1": y(p.before),
                    "y2": y(p.after),
                    "number": p.compaction_number,
                    "turn": p.turn,
                    "before": p.before,
                    "after": p.after,
                    "end": x(p.turn) > PAD_LEFT + plot_w * 0.6,
                }
            )
    step = max(1, round(count / 12)) if count else 1
    x_ticks = [{"x": x(n), "label": n} for n in range(1, count + 1) if (n - 1) % step == 0 or n == count]
    y_ticks = [{"y": y(v), "label": f"{v:,}"} for v in (0, series.token_budget // 2)]
    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "left": PAD_LEFT,
        "right": CHART_WIDTH - PAD_RIGHT,
        "bottom": CHART_HEIGHT - PAD_BOTTOM,
        "path": " ".join(path),
        "dots": dots,
        "drops": drops,
        "threshold_y": y(series.threshold_tokens),
        "threshold": series.threshold_tokens,
        "budget_y": y(series.token_budget),
        "budget": series.token_budget,
        "x_ticks": x_ticks,
        "y_ticks": y_ticks,
        "empty": not points,
    }
