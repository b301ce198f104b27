"""Which of the pinned state's actions the ticket page draws: a bounded part of a state of any size.

A supervisor needs the actions that still need someone (open intents: money reserved, not settled), those
that went wrong (failed, or recorded as a repeat of another), and the newest ones, each whole; the rest are
counted and linked to (the state JSON, the export). The money totals are the state's own computed fields,
over every action, whatever is drawn. Pure: plain functions over the agent-facing state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.state import ITEM_LISTS
from core.vocabulary import ActionStatus

ACTIONS_SHOWN = 50  # the newest actions, drawn whole
OLDER_WORTH_A_LOOK = 50  # at most this many older open intents and failed or repeated actions, drawn whole
# The page inlines the agent-facing JSON only while it lists every action and the four lists hold at most
# this many items together; past that it links to the state endpoint and the export instead.
STATE_JSON_INLINE_ITEMS = 2 * ACTIONS_SHOWN
ACTION_TARGETS_SHOWN = ACTIONS_SHOWN  # actions offered by id in the correction form's datalist


def worth_a_look(action: dict[str, Any]) -> bool:
    """An open intent (reserved, not settled), a failed action, or one recorded as a repeat of another."""
    if action.get("reversed"):
        return False
    status = action.get("status")
    return status in (ActionStatus.INTENDED, ActionStatus.FAILED) or bool(action.get("repeat_of"))


@dataclass(frozen=True)
class ActionList:
    """The actions the page draws, each in the state's order (oldest first): the older ones worth a look
    and the newest ACTIONS_SHOWN; `total` counts every action of the state."""

    total: int = 0
    newest: list[dict[str, Any]] = field(default_factory=list)
    older_worth_a_look: list[dict[str, Any]] = field(default_factory=list)
    # Older ones worth a look beyond OLDER_WORTH_A_LOOK (not drawn; counted in `not_drawn`).
    older_worth_a_look_not_drawn: int = 0

    @property
    def drawn(self) -> int:
        return len(self.newest) + len(self.older_worth_a_look)

    @property
    def not_drawn(self) -> int:
        """Actions of the state the page does not list."""
        return self.total - self.drawn


def action_list(
    state: dict[str, Any], *, newest: int = ACTIONS_SHOWN, older: int = OLDER_WORTH_A_LOOK
) -> ActionList:
    """The state's newest `newest` actions, and its newest `older` older ones worth a look (worth_a_look);
    one pass over the actions, however many."""
    actions = state.get("actions_taken") or []
    cut = max(len(actions) - newest, 0)
    flagged = [a for a in actions[:cut] if worth_a_look(a)]
    return ActionList(
        total=len(actions),
        newest=actions[cut:],
        older_worth_a_look=flagged[-older:] if older else [],
        older_worth_a_look_not_drawn=max(len(flagged) - older, 0),
    )


def state_items(state: dict[str, Any]) -> int:
    """How many items the state's four lists hold together."""
    return sum(len(state.get(name) or []) for name in ITEM_LISTS)


def inline_state_json(state: dict[str, Any], *, newest: int = ACTIONS_SHOWN) -> bool:
    """Whether the page inlines the agent-facing JSON: a state of at most `newest` actions (all of them
    listed) and at most STATE_JSON_INLINE_ITEMS items in all."""
    return len(state.get("actions_taken") or []) <= newest and state_items(state) <= STATE_JSON_INLINE_ITEMS


def action_targets(state: dict[str, Any], *, limit: int = ACTION_TARGETS_SHOWN) -> list[tuple[str, str]]:
    """The actions a correction can mark reversed, offered by id: the newest `limit` not yet reversed,
    newest first, each with a line that names it. Any other id can be typed; the service checks it."""
    shown: list[tuple[str, str]] = []
    for a in reversed(state.get("actions_taken") or []):
        if len(shown) >= limit:
            break
        if not a.get("reversed"):
            label = f"{a['id']} {a['tool']} {a.get('item', '')} ${a.get('amount_cents', 0) / 100:,.2f}"
            shown.append((a["id"], " ".join(label.split())))
    return shown
