"""Money in free text: amounts read with their unit ($40, 40 dollars, 4000 cents, USD 40.00, 40,00 EUR,
forty dollars) and compared in cents; a bare number is money unless it reads as a turn, a count or a time.

Pure: no Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.coverage.words import prepare

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d+(?:[.,]\d{1,2})?"
_CURRENCY = r"us\$|\$|€|£|usd|eur|gbp|cad|aud"
_MONEY_PATTERNS = (
    # $40, USD 40.00, € 12,50
    (re.compile(rf"(?<![\w#/])(?:{_CURRENCY})\s?(?P<num>{_NUM})(?![\w%/])"), 100),
    # 4000 cents, 4000¢
    (re.compile(rf"(?<![\w#/.,$€£-])(?P<num>{_NUM})\s?(?:cents?|cts?|¢)(?!\w)"), 1),
    # 40 dollars, 40.00 EUR, 40$
    (
        re.compile(
            rf"(?<![\w#/.,$€£-])(?P<num>{_NUM})\s?(?:\$|€|£|usd|eur|gbp|cad|aud|dollars?|bucks|euros?|pounds?)(?!\w)"
        ),
        100,
    ),
)
_UNITS = {
    w: n
    for n, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
_TENS = {
    w: 10 * n
    for n, w in enumerate(
        ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    )
    if n >= 2
}
_WORD_NUMBER = (
    rf"(?:(?:a|one|{'|'.join(_UNITS)})\s+hundred(?:\s+(?:and\s+)?)?)?"
    rf"(?:(?:{'|'.join(_TENS)})(?:[\s-](?:{'|'.join(list(_UNITS)[1:10])}))?|{'|'.join(_UNITS)})?"
)
_WORD_MONEY = re.compile(rf"\b(?P<num>{_WORD_NUMBER})\s+(?P<unit>dollars?|bucks|euros?|pounds?|cents?)\b")
# A bare number, which may be cents (`4000`) or whole money (`40`), unless it is a turn, a count or a time.
_BARE_NUMBER = re.compile(r"(?<![\w#/.,:$€£-])(?P<num>\d+(?:\.\d{2})?)(?![\w%/:.,-]|\.\d|,\d)")
_NOT_MONEY_BEFORE = re.compile(
    r"(?<![a-z])(?:turns?|steps?|#|order|orders|no\.?|number|item|items|qty|x|id|days?|weeks?|within|jan|feb|mar|apr|may|"
    r"jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|september|october|"
    r"november|december|at|by|before|after|until|room|flight|seat|gate|message|call|version|v)\s*$"
)
_NOT_MONEY_AFTER = re.compile(
    r"^\s*(?:days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?|items?|units?|pcs|pieces?|x|times|"
    r"am|pm|kg|g|lbs?|cm|mm|m|inch|inches|st|nd|rd|th|of\s+them|boxes|parcels|packages|orders|"
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|"
    r"september|october|november|december)(?![a-z])|^%"
)


def _number(text: str) -> float | None:
    if re.fullmatch(r"\d+,\d{1,2}", text):  # 12,50 (a decimal comma)
        text = text.replace(",", ".")
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _word_number(text: str) -> int | None:
    total, value = 0, 0
    parts = re.split(r"[\s-]+", text.strip())
    for part in parts:
        if part == "and":
            continue
        if part in ("a", "one") and parts[-1:] != [part] and "hundred" in parts:
            value = 1
        elif part in _UNITS:
            value += _UNITS[part]
        elif part in _TENS:
            value += _TENS[part]
        elif part == "hundred":
            total, value = total + max(value, 1) * 100, 0
        else:
            return None
    return total + value if parts and parts != [""] else None


@dataclass(frozen=True)
class Amounts:
    """Money named in a text, in cents: `stated` carries a unit (or two decimals), `bare` are numbers that
    could be cents or whole money (both readings kept)."""

    stated: frozenset[int]
    bare: frozenset[int]

    @property
    def any(self) -> bool:
        return bool(self.stated or self.bare)

    def names(self, cents: int) -> bool:
        return cents in self.stated or cents in self.bare


def amounts_in(text: str) -> tuple[Amounts, str]:
    """The money a text names, and the text with that money blanked out (so its digits are not words)."""
    prepared = prepare(text)
    stated: set[int] = set()
    spans: list[tuple[int, int]] = []

    def taken(start: int, end: int) -> bool:
        return any(s < end and start < e for s, e in spans)

    for pattern, scale in _MONEY_PATTERNS:
        for m in pattern.finditer(prepared):
            if taken(m.start(), m.end()):
                continue
            number = _number(m.group("num"))
            if number is not None:
                stated.add(round(number * scale))
                spans.append((m.start(), m.end()))
    for m in _WORD_MONEY.finditer(prepared):
        if not m.group("num").strip() or taken(m.start(), m.end()):
            continue
        value = _word_number(m.group("num"))
        if value is not None:
            stated.add(value if m.group("unit").startswith("cent") else value * 100)
            spans.append((m.start(), m.end()))
    bare: set[int] = set()
    for m in _BARE_NUMBER.finditer(prepared):
        if taken(m.start(), m.end()):
            continue
        if _NOT_MONEY_BEFORE.search(prepared[: m.start()]) or _NOT_MONEY_AFTER.match(prepared[m.end() :]):
            continue
        raw = m.group("num")
        if "." in raw:
            stated.add(round(float(raw) * 100))
        else:
            bare.update({int(raw), int(raw) * 100})
        spans.append((m.start(), m.end()))
    for start, end in sorted(spans, reverse=True):
        prepared = prepared[:start] + " " + prepared[end:]
    return Amounts(frozenset(stated), frozenset(bare)), prepared
