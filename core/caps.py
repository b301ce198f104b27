"""A ticket class's money caps, and the headroom an action leaves under them.

Pure: no Django. The class stores its caps as JSON (`TicketClass.money_caps`), e.g.
`{"refund": {"per_ticket_cents": 10000, "per_order_cents": 15000, "share_of_paid": 1.0}}`: at most this much
refunded on one ticket, on all the tickets of one order, and (when the ticket carries the order's paid amount)
no more than that share of it, on either. Credits have the same three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CappedEffect = Literal["refund", "credit"]
CAPPED_EFFECTS: tuple[CappedEffect, ...] = ("refund", "credit")
Scope = Literal["ticket", "order"]


def _described(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors())


class CatalogCapsError(ValueError):
    """Caps that cannot be used: says which entry is wrong."""


class EffectCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    per_ticket_cents: int | None = Field(default=None, ge=0)
    per_order_cents: int | None = Field(default=None, ge=0)
    share_of_paid: float | None = Field(default=None, gt=0, le=10)


class MoneyCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    refund: EffectCaps | None = None
    credit: EffectCaps | None = None

    @classmethod
    def build(cls, data: object) -> MoneyCaps:
        if data in (None, {}):
            return cls()
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise CatalogCapsError(
                'money caps must look like {"refund": {"per_ticket_cents": 10000, "per_order_cents": 15000, '
                f'"share_of_paid": 1.0}}, "credit": {{...}}: {_described(exc)}'
            ) from None

    def of(self, effect: str) -> EffectCaps | None:
        return getattr(self, effect, None) if effect in CAPPED_EFFECTS else None

    def has_order_caps(self, effect: str) -> bool:
        caps = self.of(effect)
        return caps is not None and (caps.per_order_cents is not None or caps.share_of_paid is not None)


@dataclass(frozen=True)
class CapBreach:
    """An action past a cap: which one, how much it allows, how much is used, the room left."""

    effect: str
    scope: Scope
    cap_cents: int
    used_cents: int
    amount_cents: int
    basis: str  # "absolute" or "share_of_paid"

    @property
    def headroom_cents(self) -> int:
        return max(self.cap_cents - self.used_cents, 0)

    def message(self) -> str:
        basis = "" if self.basis == "absolute" else " (the class's share of the order's paid amount)"
        where = "this ticket" if self.scope == "ticket" else "this order's tickets"
        return (
            f"refused: {self.amount_cents} cents more of {self.effect} would pass the cap of {self.cap_cents} "
            f"cents on {where}{basis}: {self.used_cents} cents are already {self.effect}ed or reserved, "
            f"{self.headroom_cents} cents of headroom are left"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "effect": self.effect,
            "scope": self.scope,
            "cap_cents": self.cap_cents,
            "used_cents": self.used_cents,
            "amount_cents": self.amount_cents,
            "headroom_cents": self.headroom_cents,
            "basis": self.basis,
        }


def _limits(caps: EffectCaps, scope: Scope, order_paid_cents: int | None) -> list[tuple[int, str]]:
    absolute = caps.per_ticket_cents if scope == "ticket" else caps.per_order_cents
    limits = [] if absolute is None else [(absolute, "absolute")]
    if caps.share_of_paid is not None and order_paid_cents is not None:
        limits.append((int(order_paid_cents * caps.share_of_paid), "share_of_paid"))
    return limits


def cap_breach(
    caps: MoneyCaps,
    *,
    effect: str,
    amount_cents: int,
    ticket_used_cents: int,
    order_used_cents: int | None,
    order_paid_cents: int | None,
) -> CapBreach | None:
    """The first cap this action would pass, tightest first, or None. `*_used_cents`: what the actions that
    still hold their money (succeeded or reserved, not failed or reversed) already count against it;
    `order_used_cents` is None when the order's other tickets were not read (no order cap to check)."""
    effect_caps = caps.of(effect)
    if effect_caps is None:
        return None
    breaches = []
    scopes: list[tuple[Scope, int | None]] = [("ticket", ticket_used_cents), ("order", order_used_cents)]
    for scope, used in scopes:
        if used is None:
            continue
        for cap, basis in _limits(effect_caps, scope, order_paid_cents):
            if used + amount_cents > cap:
                breaches.append(CapBreach(effect, scope, cap, used, amount_cents, basis))
    return min(breaches, key=lambda b: b.headroom_cents, default=None)
