"""Chart geometry for the server-side SVG charts: the context size per turn and the metrics per day.

Plain functions from view models to coordinates; the templates only draw what these return.
"""

from __future__ import annotations

from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from desk.pages.formatting import usd
from desk.pages.metrics import DailySeries
from desk.pages.ticket import ContextPoint, ContextSeries

CHART_WIDTH = 960
CHART_HEIGHT = 260
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 16, 16, 30
# Beyond this many drops their figures would overlap: each keeps its figure as a tooltip instead.
DROP_LABELS_MAX = 12


def _step_path(xs: list[float], ys: list[float]) -> str:
    """A horizontal step line through (xs[i], ys[i]), changing level halfway between points."""
    if not xs:
        return ""
    parts = [f"M{xs[0] - 6 if len(xs) > 1 else xs[0] - 20},{ys[0]}"]
    for i in range(1, len(xs)):
        mid = round((xs[i - 1] + xs[i]) / 2, 1)
        parts.append(f"H{mid}")
        if ys[i] != ys[i - 1]:
            parts.append(f"V{ys[i]}")
    parts.append(f"H{xs[-1] + 6 if len(xs) > 1 else xs[-1] + 20}")
    return " ".join(parts)


def _turn_ticks(first: int, last: int, *, most: int = 12) -> list[int]:
    """The first and last turn and, between them, round turn numbers (a step of 1, 2 or 5 times a power
    of ten) at most `most` in all, none crowding the last."""
    k = 0
    while (last - first + 1) / (step := (1, 2, 5)[k % 3] * 10 ** (k // 3)) > most:
        k += 1
    inner = [n for n in range((first // step + 1) * step, last, step) if last - n >= step / 2]
    return sorted({first, *inner, last})


def _dot_svg(x: float, y: float, point: ContextPoint) -> str:
    """A point's circle with its figures as a tooltip. Written here rather than in a template loop: up
    to `CHART_MAX_POINTS` circles of seven figures each cost the template engine more than the rest of
    the page. Every value is a number or a fixed word, so there is nothing to escape."""
    over = " over" if point.tokens > point.threshold_tokens else ""
    replayed = " replayed" if point.replayed else ""
    return (
        f'<circle class="dot{over}{replayed}" cx="{x}" cy="{y}" r="3.5" data-turn="{point.turn:d}"'
        f' data-tokens="{point.tokens:d}" data-threshold="{point.threshold_tokens:d}"><title>turn {point.turn:d}:'
        f" {point.tokens:d} tokens (threshold {point.threshold_tokens:d}, budget {point.token_budget:d})"
        f"{', replayed from stored counts' if point.replayed else ''}</title></circle>"
    )


def _drops_svg(drops: list[dict[str, Any]], *, labelled: bool) -> SafeString:
    """One vertical line per compaction, from its tokens before to its tokens after, with those figures
    beside it (or, when there are too many to read apart, as its tooltip). Numbers and a status value
    (`CompactionStatus`, escaped all the same) only."""
    parts = []
    for d in drops:
        status = escape(d["status"])
        figure = f"#{int(d['number'])}{' forced' if d['status'] == 'forced' else ''}: {int(d['before'])} → {int(d['after'])}"
        if labelled:
            end = ' class="end"' if d["end"] else ""
            label = (
                f'<text x="{d["x"]}" y="{d["y2"]}" dx="{-6 if d["end"] else 4}" dy="-6"{end}>{figure}</text>'
            )
        else:
            label = f"<title>{figure}</title>"
        parts.append(
            f'<g class="drop drop-{status}" data-compaction="{int(d["number"])}"><line x1="{d["x"]}" y1="{d["y1"]}"'
            f' x2="{d["x"]}" y2="{d["y2"]}"/>{label}</g>'
        )
    return mark_safe("\n".join(parts))


def _segments(points: list[ContextPoint], xs: list[float], *, right: float, y: Any) -> list[dict[str, Any]]:
    """The stretches of consecutive points with the same threshold and budget in force, each with where
    its labels go: above its own lines, the newest at the plot's right edge, an older one at its own
    start (where its step line begins: halfway from the point before), clear of the peaks that usually
    end a stretch before a compaction."""
    segments: list[dict[str, Any]] = []
    for i, p in enumerate(points):
        if segments and segments[-1]["figures"] == (p.threshold_tokens, p.token_budget):
            segments[-1]["last_turn"] = p.turn
            continue
        segments.append(
            {
                "figures": (p.threshold_tokens, p.token_budget),
                "first_turn": p.turn,
                "last_turn": p.turn,
                "first": i,
                "threshold": p.threshold_tokens,
                "budget": p.token_budget,
                "threshold_y": y(p.threshold_tokens),
                "budget_y": y(p.token_budget),
            }
        )
    for index, segment in enumerate(segments):
        first = segment.pop("first")
        segment["at_start"] = index < len(segments) - 1
        if not segment["at_start"]:
            segment["x"] = right
        elif first == 0:
            segment["x"] = xs[0]
        else:
            segment["x"] = round((xs[first - 1] + xs[first]) / 2 + 4, 1)
    return segments


# The phone's chart: fewer, larger units across, so the compaction drops and the labels stay legible in
# a 350 px box (the wide one would be scaled down to a third or scroll sideways).
NARROW_CHART = {"width": 400, "height": 300, "most_ticks": 6, "drop_labels": 4}


def context_chart(
    series: ContextSeries,
    *,
    width: int = CHART_WIDTH,
    height: int = CHART_HEIGHT,
    most_ticks: int = 12,
    drop_labels: int = DROP_LABELS_MAX,
) -> dict[str, Any]:
    """The assembled request after each turn, with the threshold and budget in force at each turn.

    A compaction shows as a vertical line at its turn, from the event's own tokens before to its tokens
    after: the figures its marker and the API report. A point's x is its turn number, so a sampled
    series (a long ticket) spans the same axis as the whole one.
    """
    points = series.points
    plot_w = width - PAD_LEFT - PAD_RIGHT
    plot_h = height - PAD_TOP - PAD_BOTTOM
    top = max(series.peak, 1) * 1.08
    first, last = series.first_turn, series.last_turn
    span = last - first

    def x(turn: int) -> float:
        return round(PAD_LEFT + (plot_w * (turn - first) / span if span else plot_w / 2), 1)

    def y(tokens: float) -> float:
        return round(PAD_TOP + plot_h * (1 - tokens / top), 1)

    path: list[str] = []
    dots: list[str] = []
    drops = []
    xs = []
    for p in points:
        px, py = x(p.turn), y(p.tokens)
        xs.append(px)
        path.append(f"{'M' if not path else 'L'}{px},{py}")
        event = p.compaction
        if event is not None and event.tokens_after is not None:
            y1, y2 = y(event.tokens_before), y(event.tokens_after)
            path.append(f"L{px},{y1} L{px},{y2}")
            drops.append(
                {
                    "x": px,
                    "y1": y1,
                    "y2": y2,
                    "number": event.number,
                    "status": event.status,
                    "before": event.tokens_before,
                    "after": event.tokens_after,
                    "end": px > PAD_LEFT + plot_w * 0.6,
                }
            )
        dots.append(_dot_svg(px, py, p))
    labelled = len(drops) <= drop_labels
    segments = _segments(points, xs, right=width - PAD_RIGHT, y=y)
    latest = series.latest
    ticks = _turn_ticks(first, last, most=most_ticks) if points else []
    x_ticks = [{"x": x(n), "label": n} for n in ticks]
    budget = latest.token_budget if latest else 0
    y_ticks = [{"y": y(v), "label": f"{v:,}"} for v in (0, budget // 2)]
    return {
        "width": width,
        "height": height,
        "left": PAD_LEFT,
        "right": width - PAD_RIGHT,
        "bottom": height - PAD_BOTTOM,
        "path": " ".join(path),
        "dot_count": len(dots),
        "dots_svg": mark_safe("".join(dots)),  # numbers and fixed words only: see _dot_svg
        "drops": drops,
        "drops_svg": _drops_svg(drops, labelled=labelled),
        "sampled": series.sampled,
        "turn_count": series.turn_count,
        "threshold_path": _step_path(xs, [y(p.threshold_tokens) for p in points]),
        "budget_path": _step_path(xs, [y(p.token_budget) for p in points]),
        # One pair of labels per stretch of turns with the same figures in force, each on its own lines:
        # a class change after a turn relabels nothing before it.
        "segments": segments,
        "threshold": latest.threshold_tokens if latest else 0,
        "thresholds": sorted({p.threshold_tokens for p in points}),
        "budget": budget,
        "budget_y": y(budget),
        "x_ticks": x_ticks,
        "y_ticks": y_ticks,
        "empty": not points,
    }


DAY_WIDTH = 640
DAY_HEIGHT = 220
DAY_PAD_LEFT, DAY_PAD_RIGHT, DAY_PAD_TOP, DAY_PAD_BOTTOM = 84, 12, 16, 40
CLASS_COLOURS = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#64748b")


def _figure(value: float, unit: str) -> str:
    if unit == "usd":
        return usd(value)
    return f"{value:,.0f}"


def daily_chart(series: DailySeries) -> dict[str, Any]:
    """Bars per day, stacked by class, with the highest day's value on the axis."""
    days = series.days
    plot_w = DAY_WIDTH - DAY_PAD_LEFT - DAY_PAD_RIGHT
    plot_h = DAY_HEIGHT - DAY_PAD_TOP - DAY_PAD_BOTTOM
    totals = [sum(series.values[c][i] for c in series.classes) for i in range(len(days))]
    top = max(totals, default=0) or 1
    slot = plot_w / max(len(days), 1)
    bar_w = round(max(slot * 0.7, 1), 1)
    colours = {slug: CLASS_COLOURS[i % len(CLASS_COLOURS)] for i, slug in enumerate(series.classes)}
    bars = []
    for i, day in enumerate(days):
        base = 0.0
        x = round(DAY_PAD_LEFT + slot * i + (slot - bar_w) / 2, 1)
        for slug in series.classes:
            value = series.values[slug][i]
            if not value:
                continue
            height = plot_h * value / top
            y = DAY_PAD_TOP + plot_h - base - height
            bars.append(
                {
                    "x": x,
                    "y": round(y, 1),
                    "w": bar_w,
                    "h": round(max(height, 0.5), 1),
                    "colour": colours[slug],
                    "title": f"{day.isoformat()} · {slug}: {_figure(value, series.unit)}",
                }
            )
            base += height
    step = max(1, round(len(days) / 7))
    x_ticks = [
        {"x": round(DAY_PAD_LEFT + slot * i + slot / 2, 1), "label": day.strftime("%b %-d")}
        for i, day in enumerate(days)
        if i % step == 0
    ]
    return {
        "key": series.key,
        "title": series.title,
        "width": DAY_WIDTH,
        "height": DAY_HEIGHT,
        "left": DAY_PAD_LEFT,
        "right": DAY_WIDTH - DAY_PAD_RIGHT,
        "top": DAY_PAD_TOP,
        "bottom": DAY_HEIGHT - DAY_PAD_BOTTOM,
        "bars": bars,
        "x_ticks": x_ticks,
        "top_label": _figure(max(totals, default=0), series.unit),
        "total_label": _figure(series.total, series.unit),
        "legend": [{"slug": s, "colour": colours[s]} for s in series.classes],
        "empty": not bars,
    }
