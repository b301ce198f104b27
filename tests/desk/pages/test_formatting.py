"""Money at two decimals, sub-cent costs in cents, times with their timezone."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import override_settings
from django.utils import timezone

from desk.pages.formatting import usd, usd_cents, when


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("0"), "$0.00"),
        (None, "$0.00"),
        (Decimal("12.5"), "$12.50"),
        (Decimal("1234.567"), "$1,234.57"),
        (Decimal("0.01"), "$0.01"),
        (Decimal("0.000764"), "0.076¢"),
        (Decimal("0.00054"), "0.054¢"),
        (Decimal("0.0000001"), "<0.001¢"),
        (Decimal("-0.5"), "-$0.50"),
    ],
)
def test_money_reads_as_money(amount: Decimal | None, shown: str) -> None:
    assert usd(amount) == shown


def test_cents_are_dollars_at_two_decimals() -> None:
    assert (usd_cents(4000), usd_cents(None), usd_cents(-250)) == ("$40.00", "$0.00", "-$2.50")


def test_times_carry_their_timezone() -> None:
    moment = datetime(2026, 11, 30, 5, 36, tzinfo=UTC)
    assert when(moment) == "2026-11-30 05:36 UTC"
    with override_settings(TIME_ZONE="Europe/London"), timezone.override("America/New_York"):
        assert when(moment) == "2026-11-30 00:36 EST"
