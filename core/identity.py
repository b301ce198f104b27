"""One identity per action, however an agent spells it, and what a class knows about its tools.

Pure: no Django. The repeat guard and the compaction coverage check compare identities; the stored action
keeps what the agent sent.
"""

from __future__ import annotations

import hashlib
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
# Every Unicode dash (category Pd: U+2010 hyphen, U+2011 non-breaking hyphen, en and em dash, ...) and the
# minus signs read as "-" (a model writes `garden\u2011table` for `garden-table`).
# (Listed rather than found by a walk over every code point at import; a test checks the list is whole.)
DASH_CODE_POINTS = (
    0x002D,
    0x058A,
    0x05BE,
    0x1400,
    0x1806,
    0x2010,
    0x2011,
    0x2012,
    0x2013,
    0x2014,
    0x2015,
    0x2E17,
    0x2E1A,
    0x2E3A,
    0x2E3B,
    0x2E40,
    0x2E5D,
    0x301C,
    0x3030,
    0x30A0,
    0xFE31,
    0xFE32,
    0xFE58,
    0xFE63,
    0xFF0D,
    0x10EAD,
    0x2212,  # minus sign
    0x2796,  # heavy minus sign
    0x207B,  # superscript minus (NFKC makes it U+2212)
    0x208B,  # subscript minus
)
_DASHES = dict.fromkeys(DASH_CODE_POINTS, "-")
_SEPARATORS = re.compile(r"[\s\-_]+")
SEPARATOR = "_"


@lru_cache(maxsize=8192)
def normalize_name(text: str) -> str:
    """The comparable form of a tool or item name.

    Unicode NFKC, case folding, zero-width and control characters removed, runs of spaces, `-` and `_`
    as one separator, stripped: `Garden-Table`, `garden\u200b-table` and `garden_table` are one name.
    """
    text = unicodedata.normalize("NFKC", text or "").casefold().translate(_ZERO_WIDTH).translate(_DASHES)
    # Control characters (Cc) and format characters (Cf: soft hyphen, bidi marks) carry no meaning here;
    # tabs and newlines are whitespace first, so they become separators rather than vanish.
    text = "".join(
        ch if ch.isspace() else "" if unicodedata.category(ch) in ("Cc", "Cf") else ch for ch in text
    )
    # Folding can decompose again (e.g. "ﬁ" -> "fi" is NFKC, but casefold("ß") -> "ss"): normalize once more.
    text = unicodedata.normalize("NFKC", text)
    return _SEPARATORS.sub(SEPARATOR, text).strip(SEPARATOR)


# Order references (`SU-87310`, `#1`, `W2611340`, `48213`) name where the item is, not which item it is.
_ORDER_REFERENCE = re.compile(r"(?:\border\s*)?(?:#\s*\d+|\b[a-z]{1,5}[-\s]?\d{3,}\b|\b\d{4,}\b)")
_NOT_ALPHANUMERIC = re.compile(r"[^\w]+|_+")
_ARTICLES = frozenset({"a", "an", "the", "my", "our", "your", "their", "this", "that", "these", "those"})


def _singular(word: str) -> str:
    """A plural's singular, by the common English endings (tables -> table, boxes -> box, batteries -> battery)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=8192)
def normalize_item(text: str) -> str:
    """The comparable form of an item: one key for every way an agent names the same thing.

    On top of `normalize_name` (Unicode forms, case, invisible characters, every dash and minus): order
    references, punctuation, articles and plural endings are dropped and the word order is ignored, and the
    words are joined without a separator, so `the garden tables`, `table (garden)`, `garden-table (SU-87310)`,
    `garden-table #1`, `garden/table` and `gardentable` are one item (`gardentable`). Different words for one
    thing (`scratched leg`) stay different: that is the belief check's job. An item that is only a reference
    (a bill `B1002`, a line `L1001`, an order `#W4923227`) is that record. Empty only for an empty item.
    """
    text = normalize_name(text).replace(SEPARATOR, " ")
    # An item that is nothing but a reference (`B1002`, `L1001`, `#W4923227`) names that record: dropping
    # the reference would leave it empty, which means the whole order, and two bills would collide.
    words = (
        _NOT_ALPHANUMERIC.sub(" ", _ORDER_REFERENCE.sub(" ", text)).split()
        or _NOT_ALPHANUMERIC.sub(" ", text).split()
    )
    # An item that is nothing but an article (`a`, the item called "A") keeps it.
    kept = [w for w in words if w not in _ARTICLES] or words
    return "".join(sorted(_singular(w) for w in kept))


@lru_cache(maxsize=8192)
def action_identity(tool: str, item: str) -> tuple[str, str]:
    """(tool, item) as the guard compares a tool that moves no money."""
    return normalize_name(tool), normalize_item(item)


# The argument names an agent's tool call carries its items in (tau-bench's `item_ids`, ...).
ITEM_ARGS = (
    "item",
    "items",
    "item_id",
    "item_ids",
    "item_name",
    "product",
    "product_name",
    "sku",
    "line_item",
)


def action_items(item: str, args: dict[str, object] | None) -> frozenset[str]:
    """The items an action is about, normalized: its `item`, else the items named in its arguments. Empty:
    no item at all (for a money tool, the whole order)."""
    if normalize_item(item):
        return frozenset({normalize_item(item)})
    found: set[str] = set()
    for name, value in (args or {}).items():
        if normalize_name(name) not in ITEM_ARG_NAMES:
            continue
        for one in value if isinstance(value, list) else [value]:
            if isinstance(one, str | int) and not isinstance(one, bool) and normalize_item(str(one)):
                found.add(normalize_item(str(one)))
    return frozenset(found)


ITEM_ARG_NAMES = frozenset(normalize_name(n) for n in ITEM_ARGS)


def action_keys(item: str, args: dict[str, object] | None) -> list[str]:
    """The guard's index keys of an action: a digest of each item it is about (`action_items`), or of "" when
    it names none (the whole order). Two actions that may collide share a key, or one of them has the "" key."""
    found = action_items(item, args) or frozenset({""})
    return sorted(hashlib.blake2b(key.encode(), digest_size=16).hexdigest() for key in found)


# The keys of an action about no item.
WHOLE_ORDER_KEYS = action_keys("", None)

# A refund and a store credit both pay the buyer back: for the guard, one item is paid back once.
PAYOUT = "payout"
_GUARD_EFFECT: dict[MoneyEffect, str] = {"refund": PAYOUT, "credit": PAYOUT, "charge": "charge"}


def guard_effect(effect: MoneyEffect) -> str:
    """What the guard compares a money tool by: refunds and credits pay the buyer, charges take from them."""
    return _GUARD_EFFECT[effect]


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAME_WORDS = re.compile(r"[a-z]+")
# The words that say a tool moves money, and which way (`issueRefund`, `stripe.refund`, `refunds.create`).
_MONEY_WORDS: dict[str, MoneyEffect] = {
    "refund": "refund",
    "refunds": "refund",
    "refunded": "refund",
    "reimburse": "refund",
    "credit": "credit",
    "credits": "credit",
    "charge": "charge",
    "charges": "charge",
}


_NAME_EFFECT_ORDER: tuple[MoneyEffect, ...] = ("refund", "credit", "charge")


def effect_by_name(tool: str) -> MoneyEffect | None:
    """The money effect a tool's name says it has (refund before credit before charge), or None."""
    words = _NAME_WORDS.findall(_CAMEL.sub(" ", tool).casefold())
    effects = {_MONEY_WORDS[w] for w in words if w in _MONEY_WORDS}
    return next((e for e in _NAME_EFFECT_ORDER if e in effects), None)


def has_words(text: str) -> bool:
    """True when a text has a word in it (two letters in a row): `"."` or a zero-width space is no reason."""
    return re.search(r"[^\W\d_]{2,}", normalize_name(text)) is not None


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
    # Tools an admin said move no money (`null` in the class's money tools), whatever their name says.
    not_money: tuple[str, ...] = ()
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
        not_money: list[str] = []
        for tool, effect in money.items():
            if effect is not None and effect not in MONEY_EFFECTS:
                raise CatalogError(
                    f"money tool {tool!r} has effect {effect!r}: use one of {', '.join(MONEY_EFFECTS)}, "
                    "or null for a tool that moves no money"
                )
            name = normalize_name(tool)
            if not name:
                raise CatalogError("a money tool needs a name")
            if effect is None:
                not_money.append(name)
            else:
                effects.setdefault(name, effect)
        return cls(irreversible=names, money=effects, not_money=tuple(dict.fromkeys(not_money)))

    @classmethod
    def default(cls) -> ToolCatalog:
        return _DEFAULT

    def is_irreversible(self, tool: str) -> bool:
        found = self._irreversible_of.get(tool)
        if found is None:
            # Money that moved does not move back by itself: a money tool is irreversible, listed or not.
            found = self._irreversible_of[tool] = (
                _matches(self.irreversible, normalize_name(tool)) is not None
                or self.money_effect(tool) is not None
            )
        return found

    def money_effect(self, tool: str) -> MoneyEffect | None:
        """The tool's money effect: the catalog's, else the one its name says (until an admin classifies it)."""
        if tool not in self._effect_of:
            pattern = _matches(tuple(self.money), normalize_name(tool))
            if pattern is not None:
                self._effect_of[tool] = self.money[pattern]
            elif _matches(self.not_money, normalize_name(tool)) is not None:
                self._effect_of[tool] = None
            else:
                self._effect_of[tool] = effect_by_name(tool)
        return self._effect_of[tool]

    def is_unclassified_money(self, tool: str) -> bool:
        """A tool treated as money only because its name says so: no admin has classified it."""
        name = normalize_name(tool)
        return (
            _matches(tuple(self.money), name) is None
            and _matches(self.not_money, name) is None
            and effect_by_name(tool) is not None
        )


_DEFAULT = ToolCatalog.build(irreversible=list(DEFAULT_IRREVERSIBLE_TOOLS), money=dict(DEFAULT_MONEY_TOOLS))
