"""The agent-facing state kept as the text it is served as: read and sent without parsing or validating it.

A state GET and a context GET answer the state of the version they read. Parsing a stored JSON document,
putting its keys back in order and writing it out again grows with the state (about 13 ms of CPU at 2,000
actions, against 1 ms for the request around it). So each version keeps its state as text, one column per
list: the list's items as the compact JSON they are served as, joined with commas; and the money totals.
A read joins them with the head (ticket, order, seller type, version) and the document's fixed punctuation;
a change edits, in the database, the text of the list it changed: one item appended, or one item's text
replaced or removed (found by its whole old text, which holds its unique id). Actions are kept twice: as the
state GET shows them and as the model reads them in the context (without their bookkeeping).

The JSON is DRF's: compact separators, non-ASCII kept, U+2028 and U+2029 escaped, so the joined text is
byte for byte what the API would render from the document. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.state import ITEM_LISTS, MODEL_OMITTED_ACTION_FIELDS, MONEY_TOTALS, agent_item

# The model's actions: a list of their own beside the agent's.
MODEL_ACTIONS = "model_actions"
TEXT_LISTS = (*ITEM_LISTS, MODEL_ACTIONS)


def dumps(value: Any) -> str:
    """JSON as the API renders it (rest_framework.renderers.JSONRenderer with its defaults)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def model_action(action: dict[str, Any]) -> dict[str, Any]:
    """An agent-facing action as the model reads it."""
    return {k: v for k, v in action.items() if k not in MODEL_OMITTED_ACTION_FIELDS}


def head_text(*, ticket: str, order: str, seller_type: str, version: int) -> str:
    """The document up to its first list, without the comma before it."""
    return dumps({"ticket": ticket, "order": order, "seller_type": seller_type, "version": version})[:-1]


def tail_text(totals: Mapping[str, Any]) -> str:
    """The money totals, in the document's order, without braces."""
    return dumps({name: totals.get(name, 0) for name in MONEY_TOTALS})[1:-1]


def item_text(name: str, item: dict[str, Any]) -> str:
    """One agent-facing item's text in a list (`MODEL_ACTIONS`: an agent-facing action as the model reads it)."""
    return dumps(model_action(item) if name == MODEL_ACTIONS else item)


def action_texts(stored: dict[str, Any]) -> tuple[str, str]:
    """A stored action's two served texts: as the state GET shows it, and as the model reads it."""
    shown = agent_item("actions_taken", stored)
    return item_text("actions_taken", shown), item_text(MODEL_ACTIONS, shown)


def list_texts(document: dict[str, Any]) -> dict[str, str]:
    """Each list's text of an agent-facing document (core.state.agent_state's output, in its key order)."""
    source = {name: document.get(name) or [] for name in ITEM_LISTS}
    source[MODEL_ACTIONS] = source["actions_taken"]
    return {name: ",".join(item_text(name, item) for item in items) for name, items in source.items()}


def served_text(*, head: str, lists: Mapping[str, str], tail: str, model: bool = False) -> str:
    """The document: as the state GET serves it, or (`model`) as the context gives it."""
    body = "".join(
        f',"{name}":[{lists[MODEL_ACTIONS] if model and name == "actions_taken" else lists[name]}]'
        for name in ITEM_LISTS
    )
    return f"{head}{body},{tail}}}"


def stored_document(
    *,
    ticket: str,
    order: str,
    seller_type: str,
    version: int,
    served_version: int | None,
    lists: Mapping[str, str | None],
    tail: str | None,
    model: bool = False,
) -> str | None:
    """The document a row's stored texts join into (`served_text`), or None unless they are of `version` and
    none of those it needs was dropped (NULL) or left unread."""
    skipped = "actions_taken" if model else MODEL_ACTIONS
    if served_version != version or tail is None:
        return None
    if any(lists.get(name) is None for name in TEXT_LISTS if name != skipped):
        return None
    head = head_text(ticket=ticket, order=order, seller_type=seller_type, version=version)
    return served_text(head=head, lists=lists, tail=tail, model=model)  # type: ignore[arg-type]
