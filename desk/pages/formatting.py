"""Money and time as the pages print them: dollars at two decimals, sub-cent costs in cents, times
with their timezone."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.utils import timezone

CENT = Decimal("0.01")


def usd_cents(cents: int | None) -> str:
    """4000 -> "$40.00"; -250 -> "-$2.50"."""
    value = cents or 0
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value) / 100:,.2f}"


def usd(amount: Decimal | float | int | None) -> str:
    """Dollars at two decimals; a cost under a cent in cents, so it does not read as zero.

    Decimal("12.5") -> "$12.50"; Decimal("0.000764") -> "0.076¢"; 0 -> "$0.00".
    """
    value = Decimal(str(amount or 0))
    if value == 0 or abs(value) >= CENT:
        sign = "-" if value < 0 else ""
        return f"{sign}${abs(value):,.2f}"
    cents = abs(value) * 100
    if cents < Decimal("0.001"):
        return "<0.001¢"
    digits = f"{cents:.2g}" if cents >= Decimal("0.01") else f"{cents:.3f}"
    return f"{'-' if value < 0 else ''}{digits}¢"


def when(value: datetime | None) -> str:
    """A time in the desk's timezone, with its name: "2026-11-30 05:36 UTC"."""
    if value is None:
        return "—"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or ''}".strip()
