"""One identity per action, however an agent spells it, and what a class knows about its tools.

Pure: no Django. The repeat guard and the compaction coverage check compare identities; the stored action
keeps what the agent sent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Literal

MoneyEffect = Literal["refund", "charge", "credit"]
MONEY_EFFECTS: tuple[MoneyEffect, ...] = ("refund", "charge", "credit")

# Zero-width space, non-joiner, joiner, word joiner and the byte-order mark: invisible, so never meant.
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))
_SEPARATORS = re.compile(r"[\s\-_]+")
SEPARATOR = "_"


@lru_cache(maxsize=8192)
def normalize_name(text: str) -> str:
    """The comparable form of a tool or item name.

    Unicode NFKC, case folding, zero-width and control characters removed, runs of spaces, `-` and `_`
    as one separator, stripped: `Garden-Table`, `garden\u200b-table` and `garden_table` are one name.
    """
    text = unicodedata.normalize("NFKC", text or "").casefold().translate(_ZERO_WIDTH)
    # Control characters (Cc) and format characters (Cf: soft hyphen, bidi marks) carry no meaning here;
    # tabs and newlines are whitespace first, so they become separators rather than vanish.
    text = "".join(
        ch if ch.isspace() else "" if unicodedata.category(ch) in ("Cc", "Cf") else ch for ch in text
    )
    # Folding can decompose again (e.g. "ﬁ" -> "fi" is NFKC, but casefold("ß") -> "ss"): normalize once more.
    text = unicodedata.normalize("NFKC", text)
    return _SEPARATORS.sub(SEPARATOR, text).strip(SEPARATOR)


@lru_cache(maxsize=8192)
def action_identity(tool: str, item: str) -> tuple[str, str]:
    """(tool, item) as the guard compares them."""
    return normalize_name(tool), normalize_name(item)


# ------------------------------------------------------------------ the tool catalog

# Defaults cover common names and the tau-bench retail and airline tools. Glob patterns are allowed;
# every name and pattern is compared in its normalized form.
DEFAULT_IRREVERSIBLE_TOOLS: tuple[str, ...] = (
    "issue_refund",
    "refund",
    "partial_refund",
    "refund_*",
    "*_refund",
    "cancel",
    "cancel_*",
    "charge",
    "charge_*",
    "issue_credit",
    "issue_store_credit",
    "issue_gift_card",
    "send_certificate",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
    "modify_pending_order_*",
    "book_reservation",
    "update_reservation_*",
)
DEFAULT_MONEY_TOOLS: dict[str, MoneyEffect] = {
    "issue_refund": "refund",
    "refund": "refund",
    "partial_refund": "refund",
    "refund_order": "refund",
    "refund_*": "refund",
    "*_refund": "refund",
    "cancel_order": "refund",
    "cancel_pending_order": "refund",
    "cancel_reservation": "refund",
    "return_delivered_order_items": "refund",
    "modify_pending_order_items": "refund",
    "modify_pending_order_payment": "refund",
    "charge": "charge",
    "charge_*": "charge",
    "book_reservation": "charge",
    "update_reservation_flights": "charge",
    "update_reservation_baggages": "charge",
    "send_certificate": "credit",
    "issue_credit": "credit",
    "issue_store_credit": "credit",
    "issue_gift_card": "credit",
}


def default_irreversible_tools() -> list[str]:
    return list(DEFAULT_IRREVERSIBLE_TOOLS)


def default_money_tools() -> dict[str, str]:
    return dict(DEFAULT_MONEY_TOOLS)


class CatalogError(ValueError):
    """A tool catalog that cannot be used: says which entry is wrong."""


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def _matches(patterns: tuple[str, ...], name: str) -> str | None:
    """The first pattern that matches `name`: exact names before globs."""
    if name in patterns:
        return name
    return next((p for p in patterns if _is_glob(p) and fnmatchcase(name, p)), None)


@dataclass(frozen=True)
class ToolCatalog:
    """A ticket class's irreversible tools and money tools, normalized once."""

    irreversible: tuple[str, ...] = ()
    money: dict[str, MoneyEffect] = field(default_factory=dict)
    # Answers already worked out, by the name as spelled: a state of 300 actions names a few tools.
    _irreversible_of: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    _effect_of: dict[str, MoneyEffect | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, *, irreversible: object, money: object) -> ToolCatalog:
        """From the class's JSON settings; CatalogError when they are not a list of names and a name->effect map."""
        if not isinstance(irreversible, list) or not all(isinstance(n, str) for n in irreversible):
            raise CatalogError("irreversible tools must be a JSON list of tool names or glob patterns")
        if not isinstance(money, dict):
            raise CatalogError('money tools must be a JSON object such as {"issue_refund": "refund"}')
        names = tuple(dict.fromkeys(n for n in (normalize_name(t) for t in irreversible) if n))
        effects: dict[str, MoneyEffect] = {}
        for tool, effect in money.items():
            if effect not in MONEY_EFFECTS:
                raise CatalogError(
                    f"money tool {tool!r} has effect {effect!r}: use one of {', '.join(MONEY_EFFECTS)}"
                )
            name = normalize_name(tool)
            if not name:
                raise CatalogError("a money tool needs a name")
            effects.setdefault(name, effect)
        return cls(irreversible=names, money=effects)

    @classmethod
    def default(cls) -> ToolCatalog:
        return _DEFAULT

    def is_irreversible(self, tool: str) -> bool:
        found = self._irreversible_of.get(tool)
        if found is None:
            found = self._irreversible_of[tool] = (
                _matches(self.irreversible, normalize_name(tool)) is not None
            )
        return found

    def money_effect(self, tool: str) -> MoneyEffect | None:
        if tool not in self._effect_of:
            pattern = _matches(tuple(self.money), normalize_name(tool))
            self._effect_of[tool] = self.money[pattern] if pattern is not None else None
        return self._effect_of[tool]


_DEFAULT = ToolCatalog.build(irreversible=list(DEFAULT_IRREVERSIBLE_TOOLS), money=dict(DEFAULT_MONEY_TOOLS))
