"""A state change as a reader wants it: what was added, removed or changed between two versions of the
pinned state, item by item, with the refund total's move. Pure: JSON documents in, lines out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desk.pages.formatting import usd_cents
from desk.pages.labels import CATEGORIES, item_label

# Fields of an item that identify it or are bookkeeping, not what a reader checks.
QUIET_FIELDS = {"id", "args", "idempotency_key", "recorded_by", "repeat_of"}


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "added", "removed" or "changed"
    category: str  # a summary category, or "refunded_cents_total"
    text: str

    @property
    def sign(self) -> str:
        return {"added": "+", "removed": "-"}.get(self.kind, "~")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value in (None, ""):
        return "—"
    return str(value)


def state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[DiffLine]:
    """Lines from `before` to `after`, in the pages' category order, then the refund total."""
    lines: list[DiffLine] = []
    for category, _label in CATEGORIES:
        old = {str(i.get("id")): i for i in before.get(category, []) or []}
        new = {str(i.get("id")): i for i in after.get(category, []) or []}
        for item_id, item in new.items():
            turn = f" (turn {item['at_turn']})" if item.get("at_turn") else ""
            if item_id not in old:
                lines.append(DiffLine("added", category, f"{item_id} {item_label(category, item)}{turn}"))
                continue
            was = old[item_id]
            for name in sorted(set(was) | set(item)):
                if name in QUIET_FIELDS or was.get(name) == item.get(name):
                    continue
                lines.append(
                    DiffLine(
                        "changed",
                        category,
                        f"{item_id} {name}: {_show(was.get(name))} → {_show(item.get(name))}",
                    )
                )
        for item_id, item in old.items():
            if item_id not in new:
                lines.append(DiffLine("removed", category, f"{item_id} {item_label(category, item)}"))
    old_total = before.get("refunded_cents_total")
    new_total = after.get("refunded_cents_total")
    if before and old_total != new_total:
        lines.append(
            DiffLine(
                "changed",
                "refunded_cents_total",
                f"refunded total: {usd_cents(old_total or 0)} → {usd_cents(new_total or 0)}",
            )
        )
    return lines


def change_diff(change: dict[str, Any]) -> list[DiffLine]:
    """Lines of one audited change (`StateChange.change`: its items before and after, the totals it moved)."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for item in change.get("items") or []:
        for side, doc in ((item.get("before"), before), (item.get("after"), after)):
            if side is not None:
                doc.setdefault(item["category"], []).append(side)
    refunded = (change.get("totals") or {}).get("refunded_cents_total")
    if refunded:
        before["refunded_cents_total"], after["refunded_cents_total"] = refunded
    return state_diff(before, after)
