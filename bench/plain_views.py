"""P and PS: what a plain Django view does for the same read or a similar write, with the desk's own settings.

PS (ps_state, ps_context, at the end) is the reads' baseline the ratios are against: the same middleware and
token check, hand-written SQL text. P is the ORM version, kept for comparison.

ORM + JsonResponse, no DRF serializers, no pydantic; the desk's own token check (so P pays what any API
view must), and the same answers' shape: a state's actions are its StateAction rows, in order, the totals
the stored figures of its actions. A floor for the desk, not a second implementation of it: the writes skip
the desk's rules (audit rows, the served texts, the repeat guard's normalising, the compaction policy).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from compaction.models import CompactionEvent
from core.identity import ToolCatalog, action_keys
from core.state import MONEY_TOTALS, ActionFigures, agent_item, model_state
from core.state_text import action_texts
from core.tokens import REPLY_PRIMING_TOKENS, count_turn
from core.vocabulary import CompactionStatus
from tickets.accounts import authenticate_agent_token
from tickets.models import IdempotencyRecord, PinnedState, StateAction, StateActionKey, Ticket, Turn

DENIED = JsonResponse({"error": "not_authenticated"}, status=401)


def _authenticated(request: HttpRequest) -> bool:
    """The desk's own token check (hashed key, roles in the same query): one query."""
    parts = request.headers.get("Authorization", "").split()
    return len(parts) == 2 and parts[0] == "Token" and authenticate_agent_token(key=parts[1]) is not None


def _state(pinned: PinnedState, ticket: Ticket) -> dict[str, Any]:
    """The agent-facing state: the text lists of `data`, the actions from their rows, the totals from their
    figures (the ticket's class read with it: select_related("ticket__ticket_class") or its ticket's)."""
    data = pinned.data
    rows = StateAction.objects.filter(state=pinned).order_by("number").values_list("data", flat=True)
    totals = ActionFigures(pinned.action_figures).totals(ticket.ticket_class.tool_catalog)
    return {
        "ticket": ticket.ticket_id,
        "order": ticket.order_id,
        "seller_type": ticket.seller_type,
        "version": pinned.version,
        "actions_taken": [agent_item("actions_taken", action) for action in rows],
        "customer_constraints": data.get("customer_constraints", []),
        "open_questions": data.get("open_questions", []),
        "decisions": data.get("decisions", []),
        **{name: totals[name] for name in MONEY_TOTALS},
    }


def _not_found(ticket_id: str) -> JsonResponse:
    return JsonResponse({"error": "not_found", "message": f"no ticket {ticket_id}"}, status=404)


@require_GET
def state(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    pinned = (
        PinnedState.objects.select_related("ticket__ticket_class").filter(ticket__ticket_id=ticket_id).first()
    )
    if pinned is None:
        return _not_found(ticket_id)
    return JsonResponse(_state(pinned, pinned.ticket), headers={"ETag": f'"{pinned.version}"'})


@require_GET
def context(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    ticket = Ticket.objects.select_related("ticket_class", "pinned_state").filter(ticket_id=ticket_id).first()
    if ticket is None:
        return _not_found(ticket_id)
    active = (
        CompactionEvent.objects.filter(ticket=ticket, status__in=CompactionStatus.replacing())
        .order_by("-number")
        .only("summary", "summary_tokens", "first_replaced_turn", "last_replaced_turn")
        .first()
    )
    first = (active.last_replaced_turn or 0) + 1 if active else 1
    turns = list(
        Turn.objects.filter(ticket=ticket, number__gte=first)
        .order_by("number")
        .values("number", "role", "content", "tool", "args", "tool_call_id", "boundary", "tokens")
    )
    pinned = ticket.pinned_state
    summary_tokens = active.summary_tokens if active else 0
    turn_tokens = sum(t["tokens"] for t in turns)
    tokens = {
        "system": ticket.system_prompt_tokens,
        "state": pinned.tokens,
        "summary": summary_tokens,
        "turns": turn_tokens,
        "framing": REPLY_PRIMING_TOKENS,
        "total": ticket.system_prompt_tokens
        + pinned.tokens
        + summary_tokens
        + turn_tokens
        + REPLY_PRIMING_TOKENS,
    }
    ticket_class = ticket.ticket_class
    return JsonResponse(
        {
            "system_prompt": ticket.system_prompt,
            "pinned_state": model_state(_state(pinned, ticket)),
            "summary": active.summary if active else None,
            "summary_covers_turns": [active.first_replaced_turn, active.last_replaced_turn]
            if active
            else None,
            "turns": turns,
            "tokens": tokens,
            "token_budget": ticket_class.token_budget,
            "threshold_tokens": ticket_class.threshold_tokens,
        }
    )


@csrf_exempt
@require_POST
def turn(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    body = json.loads(request.body)
    role, content = body["role"], body.get("content", "")
    with transaction.atomic():
        ticket = (
            Ticket.objects.select_for_update()
            .select_related("ticket_class")
            .filter(ticket_id=ticket_id)
            .first()
        )
        if ticket is None:
            return _not_found(ticket_id)
        tokens = count_turn(
            role=role,
            content=content,
            tool=body.get("tool", ""),
            args=body.get("args"),
            tool_call_id=body.get("tool_call_id", ""),
            encoding=ticket.ticket_class.encoding,
        )
        number = ticket.turn_count + 1
        total = ticket.context_tokens + tokens
        Turn.objects.create(
            ticket=ticket,
            number=number,
            role=role,
            content=content,
            tool=body.get("tool", ""),
            args=body.get("args"),
            tool_call_id=body.get("tool_call_id", ""),
            boundary=body.get("boundary", ""),
            tokens=tokens,
            context_tokens=total,
        )
        Ticket.objects.filter(pk=ticket.pk).update(turn_count=number, context_tokens=total)
    return JsonResponse(
        {"turn": number, "tokens": tokens, "context_tokens": total, "compaction": {"status": "not_due"}},
        status=201,
    )


@csrf_exempt
@require_POST
def action(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    key = request.headers.get("Idempotency-Key", "")
    body = json.loads(request.body)
    with transaction.atomic():
        pinned = (
            PinnedState.objects.select_for_update(of=("self", "ticket"))
            .select_related("ticket__ticket_class")
            .defer("data")
            .filter(ticket__ticket_id=ticket_id)
            .first()
        )
        if pinned is None:
            return _not_found(ticket_id)
        existing = IdempotencyRecord.objects.filter(ticket_id=pinned.ticket_id, key=key).first()
        if existing is not None:
            return JsonResponse(existing.response_body, status=existing.response_status)
        tool, item, args = body["tool"], body.get("item", ""), body.get("args") or {}
        same = StateAction.objects.filter(state=pinned, data__tool=tool, data__item=item).values_list(
            "data", flat=True
        )
        for earlier in same:
            if not earlier["reversible"] and not earlier["reversed"] and earlier["status"] != "failed":
                return JsonResponse({"error": "repeat_refused", "earlier_action": earlier}, status=409)
        number = pinned.action_count + 1
        recorded = {
            "id": f"A{number}",
            "at_turn": body.get("at_turn"),
            "source": None,
            "tool": tool,
            "item": item,
            "amount_cents": body.get("amount_cents", 0),
            "reversible": body.get("reversible", False),
            "args": args,
            "idempotency_key": key,
            "recorded_by": "agent",
            "repeat_of": None,
            "reason": body.get("reason", ""),
            "reversed": False,
            "reversed_reason": "",
            "status": "succeeded",
            "failure_reason": "",
            "intended_at": None,
            "recorded_by_user_id": None,
        }
        served, served_model = action_texts(recorded)
        StateAction.objects.create(
            state=pinned, number=number, data=recorded, served=served, served_model=served_model
        )
        StateActionKey.objects.bulk_create(
            StateActionKey(state=pinned, number=number, key=k) for k in action_keys(item, args)
        )
        figures = ActionFigures(pinned.action_figures)
        figures.apply(None, recorded)
        PinnedState.objects.filter(pk=pinned.pk).update(
            version=F("version") + 1, action_count=number, action_figures=figures.as_json()
        )
        totals = figures.totals(pinned.ticket.ticket_class.tool_catalog)
        answer = {
            "action": agent_item("actions_taken", recorded),
            "state_version": pinned.version + 1,
            **{name: totals[name] for name in MONEY_TOTALS},
        }
        IdempotencyRecord.objects.create(
            ticket_id=pinned.ticket_id, key=key, fingerprint="", response_status=201, response_body=answer
        )
    return JsonResponse(answer, status=201)


# PS: the reads as a plain Django view with the same middleware and token check, the SQL written by hand (no
# ORM query built or compiled per request), the answer in the desk's shape. The state's actions are read as the
# desk's reads read them (tickets.models.served_action_texts): their rows' served texts, the agent's
# (`served`) for the state and the model's (`served_model`) for the context, joined by string_agg in order, and
# parsed here; the totals from the actions' stored figures with the class's tool catalog.
PS_ACTIONS_TEXT = "(SELECT string_agg(a.{column}, ',' ORDER BY a.number) FROM tickets_stateaction a WHERE a.state_id = p.id)"
PS_STATE_SQL = f"""
SELECT t.ticket_id, t.order_id, t.seller_type, p.version, p.data::text, {PS_ACTIONS_TEXT.format(column="served")},
  p.action_figures::text, c.irreversible_tools::text, c.money_tools::text
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s
"""
PS_CONTEXT_SQL = f"""
SELECT t.id, t.ticket_id, t.order_id, t.seller_type, p.version, p.data::text,
  {PS_ACTIONS_TEXT.format(column="served_model")}, p.action_figures::text, c.irreversible_tools::text,
  c.money_tools::text, p.tokens, t.system_prompt, t.system_prompt_tokens, c.token_budget, c.compaction_threshold,
  (SELECT jsonb_build_object('summary', e.summary, 'tokens', e.summary_tokens, 'first', e.first_replaced_turn,
     'last', e.last_replaced_turn) FROM compaction_compactionevent e
   WHERE e.ticket_id = t.id AND e.status IN ('applied', 'forced') ORDER BY e.number DESC LIMIT 1)
FROM tickets_ticket t JOIN tickets_ticketclass c ON c.id = t.ticket_class_id
JOIN tickets_pinnedstate p ON p.ticket_id = t.id WHERE t.ticket_id = %s
"""
PS_TURNS_SQL = """
SELECT number, role, content, tool, args::text, tool_call_id, boundary, tokens FROM tickets_turn
WHERE ticket_id = %s AND number >= %s ORDER BY number
"""


def _ps_state(
    ticket_id: str,
    order_id: str,
    seller_type: str,
    version: int,
    data_text: str,
    actions_text: str | None,
    figures_text: str,
    irreversible_text: str,
    money_text: str,
) -> dict[str, Any]:
    data = json.loads(data_text)
    tools = ToolCatalog.build(irreversible=json.loads(irreversible_text), money=json.loads(money_text))
    totals = ActionFigures(json.loads(figures_text)).totals(tools)
    return {
        "ticket": ticket_id,
        "order": order_id,
        "seller_type": seller_type,
        "version": version,
        "actions_taken": json.loads(f"[{actions_text or ''}]"),
        "customer_constraints": data.get("customer_constraints", []),
        "open_questions": data.get("open_questions", []),
        "decisions": data.get("decisions", []),
        **{name: totals[name] for name in MONEY_TOTALS},
    }


@require_GET
def ps_state(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    with connection.cursor() as cursor:
        cursor.execute(PS_STATE_SQL, [ticket_id])
        row = cursor.fetchone()
    if row is None:
        return _not_found(ticket_id)
    return JsonResponse(_ps_state(*row), headers={"ETag": f'"{row[3]}"'})


@require_GET
def ps_context(request: HttpRequest, ticket_id: str) -> JsonResponse:
    if not _authenticated(request):
        return DENIED
    with connection.cursor() as cursor:
        cursor.execute(PS_CONTEXT_SQL, [ticket_id])
        row = cursor.fetchone()
        if row is None:
            return _not_found(ticket_id)
        (
            pk,
            *state,
            state_tokens,
            prompt,
            prompt_tokens,
            budget,
            share,
            active,
        ) = row
        if isinstance(active, str):  # a jsonb column comes back as text through some adapters
            active = json.loads(active)
        first = (active["last"] or 0) + 1 if active else 1
        cursor.execute(PS_TURNS_SQL, [pk, first])
        keys = ("number", "role", "content", "tool", "args", "tool_call_id", "boundary", "tokens")
        turns = [dict(zip(keys, t, strict=True)) for t in cursor.fetchall()]
    for t in turns:
        t["args"] = json.loads(t["args"]) if t["args"] is not None else None
    summary_tokens = active["tokens"] if active else 0
    turn_tokens = sum(t["tokens"] for t in turns)
    return JsonResponse(
        {
            "system_prompt": prompt,
            "pinned_state": _ps_state(*state),  # the actions as the model reads them
            "summary": active["summary"] if active else None,
            "summary_covers_turns": [active["first"], active["last"]] if active else None,
            "turns": turns,
            "tokens": {
                "system": prompt_tokens,
                "state": state_tokens,
                "summary": summary_tokens,
                "turns": turn_tokens,
                "framing": REPLY_PRIMING_TOKENS,
                "total": prompt_tokens + state_tokens + summary_tokens + turn_tokens + REPLY_PRIMING_TOKENS,
            },
            "token_budget": budget,
            "threshold_tokens": int(budget * share),
        }
    )
