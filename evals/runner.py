"""Run the eval: import each ticket into a throw-away database state, compact it, measure what survived.

Everything happens inside one transaction that is rolled back at the end, and each ticket inside
its own savepoint that is rolled back once it is measured, so the real database is never changed
and tickets from different files never collide. The ticket is written through the importer (the
same services a live agent uses, the compaction policy after each turn), with a temporary ticket
class carrying the eval's budget and summarizer. Compaction runs inline (the immediate task
backend) whatever the deployment's task backend is.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.test.utils import override_settings

from compaction.models import CompactionEvent
from compaction.selectors import assemble_context
from core.context import summary_message
from core.cost import Prices, ticket_cost
from core.errors import DeskError
from core.identity import ToolCatalog
from core.policy import TurnInfo, complete_prefix
from core.state import MONEY_TOTALS
from core.tokens import RequestSize, count_message, state_message, turn_text
from core.vocabulary import SummarizerBackend
from desk.importer import ImportClass, ImportFileError, ImportTicket, import_ticket_rolled_back
from evals.baseline import (
    ModelBaselineUsage,
    baseline_messages,
    baseline_summary,
    model_rolling_summary,
    rolling_summary,
)
from evals.facts import Contexts, check_baseline, check_facts, expected_facts
from evals.money import TOTAL_OF, replay
from evals.outcomes import measure, questions_for
from evals.results import (
    IMMEDIATE_TASKS,
    REPLACING,
    EvalOptions,
    EvalReport,
    EventFigures,
    Probe,
    TicketResult,
)
from evals.tau import is_adapted, source_of
from tickets.errors import RepeatRefused
from tickets.models import PinnedState, Ticket, TicketClass, Turn
from tickets.services.actions import record_action


class _RollBack(Exception):
    """Raised to leave a savepoint the way it was entered."""


def class_spec(doc: ImportTicket) -> dict[str, Any]:
    """The budget figures of the ticket's own class (a slug names an existing class)."""
    spec = doc.ticket_class
    if isinstance(spec, ImportClass):
        fields: dict[str, Any] = {
            "token_budget": spec.token_budget,
            "compaction_threshold": spec.compaction_threshold,
            "keep_recent_tokens": spec.keep_recent_tokens or 0,
        }
        if spec.money_tools is not None:
            fields["money_tools"] = spec.money_tools
        if spec.irreversible_tools is not None:
            fields["irreversible_tools"] = spec.irreversible_tools
        return fields
    found = TicketClass.objects.filter(slug=spec).first()
    if found is None:
        raise ImportFileError(f"ticket {doc.ticket_id}: ticket_class: no class with slug {spec!r}")
    return {
        "token_budget": found.token_budget,
        "compaction_threshold": found.compaction_threshold,
        "keep_recent_tokens": found.keep_recent_tokens,
        "encoding": found.encoding,
        "system_prompt": found.system_prompt,
        "money_tools": found.money_tools,
        "irreversible_tools": found.irreversible_tools,
    }


def _eval_class(doc: ImportTicket, options: EvalOptions) -> TicketClass:
    fields = class_spec(doc)
    # An adapted tau transcript got the budget (on top of its policy) from the adapter.
    if options.budget is not None and not is_adapted(doc):
        fields["token_budget"] = options.budget
        fields["keep_recent_tokens"] = 0  # a quarter of the eval's budget
    return TicketClass.objects.create(
        slug=f"eval-{uuid.uuid4().hex[:12]}",
        summarizer_backend=SummarizerBackend(options.summarizer),
        summarizer_model=options.summarizer_model,
        **fields,
    )


def probe_repeat(ticket: Ticket, *, tool: str, item: str, amount_cents: int) -> Probe:
    """Try the action again with a fresh key, as an agent that forgot it would; undo it if it went through."""
    try:
        with transaction.atomic():
            record_action(
                ticket=ticket,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                idempotency_key=f"eval-probe-{uuid.uuid4().hex}",
                reversible=False,
                args={"eval_probe": True},
            )
            raise _RollBack
    except RepeatRefused as refused:
        return Probe(tool=tool, item=item, refused=True, message=refused.message)
    except _RollBack:
        return Probe(
            tool=tool, item=item, refused=False, message="recorded: the desk did not refuse the repeat"
        )


def _window_at_end(ticket: Ticket, first_active_turn: int) -> list[TurnInfo]:
    rows = Turn.objects.filter(ticket=ticket, number__gte=first_active_turn).order_by("number")
    return [
        TurnInfo(number=n, role=r, tokens=t, boundary=b, tool_call_id=c, tool=tool)
        for n, r, t, b, c, tool in rows.values_list(
            "number", "role", "tokens", "boundary", "tool_call_id", "tool"
        )
    ]


def _turn_dicts(ticket: Ticket, first: int, last: int) -> list[dict[str, Any]]:
    rows = Turn.objects.filter(ticket=ticket, number__gte=first, number__lte=last).order_by("number")
    return [
        {"number": n, "role": r, "content": c, "tool": tool, "args": a}
        for n, r, c, tool, a in rows.values_list("number", "role", "content", "tool", "args")
    ]


def _money_independent(doc: ImportTicket, catalog: ToolCatalog, result: TicketResult) -> None:
    """The money the pinned state should total, worked out without the adapter's ledger.

    An adapted airline or retail transcript: its writes replayed against the domain's initial data, each
    write's money in the direction its tool has in the class's catalog. The project's own format: the
    document's actions (what it says moved). Telecom: none (no domain data here), reported as unchecked.
    """
    ledger = source_of(doc).get("money")
    result.money_ledger = {k: int(v) for k, v in ledger.items()} if isinstance(ledger, dict) else None
    expected = dict.fromkeys(MONEY_TOTALS, 0)
    if is_adapted(doc):
        replayed = replay(doc)
        if replayed is None:
            result.money_source = "unchecked: no initial data for this domain"
            return
        if replayed.unchecked:
            tools = ", ".join(sorted({f"{w.tool} on {w.record}" for w in replayed.unchecked}))
            result.money_source = f"unchecked: no domain data or earlier result for {tools}"
            result.money_replayed = replayed.totals.as_json()
            return
        for write in replayed.writes:
            effect = catalog.money_effect(write.tool)
            if effect is not None:
                expected[TOTAL_OF[effect]] += write.moved.of(effect)
        result.money_replayed = replayed.totals.as_json()
        result.money_source = "the writes replayed against the domain's data"
        if replayed.unknown_records:
            result.money_source += (
                f" ({len(replayed.unknown_records)} record(s) first shown by the transcript)"
            )
    else:
        for turn in doc.turns:
            for event in turn.events:
                if event.type == "action_taken" and not event.expect_refused:
                    effect = catalog.money_effect(event.tool or "")
                    if effect is not None:
                        expected[TOTAL_OF[effect]] += event.amount_cents
        result.money_source = "the document's actions"
    result.money_independent = expected


def _outcomes_client() -> Any:
    import openai

    return openai.OpenAI(timeout=300, max_retries=0)


def _model_baseline(
    ticket: Ticket,
    applied: list[CompactionEvent],
    rooms: list[int],
    model: str,
    result: TicketResult,
) -> list[str]:
    """The rolling summary the summarizer's model writes at each of the desk's cuts (evals/baseline.py)."""
    client = _outcomes_client()
    usage = ModelBaselineUsage()
    written: list[str] = []
    for event, room in zip(applied, rooms, strict=True):
        turns = _turn_dicts(ticket, event.first_replaced_turn or 0, event.last_replaced_turn or 0)
        reply = model_rolling_summary(client, model, written[-1] if written else "", turns, max_tokens=room)
        usage.add(reply)
        written.append(reply.text)
    result.model_baseline = usage
    return written


def _measure(doc: ImportTicket, ticket: Ticket, result: TicketResult, options: EvalOptions) -> None:
    ticket = Ticket.objects.select_related("ticket_class").get(pk=ticket.pk)
    ticket_class = ticket.ticket_class
    result.budget = ticket_class.token_budget
    result.threshold_tokens = ticket_class.threshold_tokens
    result.system_prompt_tokens = ticket.system_prompt_tokens
    events = list(CompactionEvent.objects.filter(ticket=ticket).select_related("snapshot").order_by("number"))
    for event in events:
        result.compactions[event.status] = result.compactions.get(event.status, 0) + 1
        result.events.append(
            EventFigures(
                number=event.number,
                status=event.status,
                at_turn=event.at_turn,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                reason=event.reason,
            )
        )
        result.summarizer_input_tokens += event.summarizer_input_tokens
        result.summarizer_output_tokens += event.summarizer_output_tokens
        result.summarizer_cost_usd += event.cost_usd
        result.summarizer_latency_ms += event.latency_ms
    applied = [e for e in events if e.status in REPLACING]
    result.events_tokens_before = sum(e.tokens_before for e in applied)
    result.events_tokens_after = sum(e.tokens_after or 0 for e in applied)
    result.engine_coverage_misses = sum(e.coverage_missing_count for e in applied)
    # What the false-miss rate reads (evals/false_misses.py): each replacing event's coverage, summary and the
    # pinned state its summarizer saw (a missing snapshot reads as an empty state).
    result.coverage_events = [
        {"coverage": e.coverage, "summary": e.summary, "pinned_state": _snapshot_state(e)} for e in applied
    ]

    pinned = PinnedState.objects.select_related("ticket").get(ticket=ticket)
    state = pinned.agent_json()
    all_turns = Turn.objects.filter(ticket=ticket).aggregate(total=Sum("tokens"))["total"] or 0
    result.tokens_uncompacted = RequestSize(
        system=ticket.system_prompt_tokens, state=pinned.tokens, turns=all_turns
    ).total
    context = assemble_context(ticket)
    result.tokens_context = context.tokens.total
    result.ended_over_budget = result.tokens_context > ticket_class.token_budget
    first_active = (applied[-1].last_replaced_turn or 0) + 1 if applied else 1
    result.safe_cut_at_end = complete_prefix(_window_at_end(ticket, first_active)) > 0

    # What the agent sees right after each compaction, and at the end of the ticket; and the same
    # requests with the summary-only baseline in place of the pinned state and the desk's summary.
    assembled = [assemble_context(ticket, through_turn=e.at_turn) for e in applied]
    contexts: list[tuple[int | None, list[dict[str, Any]]]] = [
        (e.at_turn, a.messages()) for e, a in zip(applied, assembled, strict=True)
    ]
    contexts.append((None, context.messages()))
    result.contexts_checked = len(contexts)
    rolling: list[str] = []
    rooms: list[int] = []  # the room in tokens, for the model-written baseline
    for event, at in zip(applied, assembled, strict=True):
        room = len(state_message(at.pinned_state)) + len(summary_message(at.summary or {}))
        rooms.append(at.tokens.state + at.tokens.summary)
        turns = _turn_dicts(ticket, event.first_replaced_turn or 0, event.last_replaced_turn or 0)
        rolling.append(rolling_summary(rolling[-1] if rolling else "", turns, room_chars=room))

    def replayed(texts: list[str]) -> tuple[Contexts, int]:
        """The contexts with this rolling summary in place of the state and the desk's summary, and the
        final request's tokens. After compaction k it carries its k-th summary; at the end, its latest."""
        last = texts[-1] if texts else None
        out = [
            (at, baseline_messages(messages, texts[index] if index < len(texts) else last))
            for index, (at, messages) in enumerate(contexts)
        ]
        summary_tokens = (
            count_message(summary_message(baseline_summary(last)), ticket_class.encoding) if last else 0
        )
        return out, context.tokens.total - context.tokens.state - context.tokens.summary + summary_tokens

    latest = rolling[-1] if rolling else None
    baseline_contexts, result.tokens_baseline_context = replayed(rolling)
    model_rolling: list[str] | None = None
    if options.baseline == "model" and options.baseline_model:
        model_rolling = _model_baseline(ticket, applied, rooms, options.baseline_model, result)
        model_contexts, result.tokens_model_baseline_context = replayed(model_rolling)

    if options.outcomes_model and applied:
        last = applied[-1]
        full = [
            {"role": "system", "content": ticket.system_prompt or ""},
            *_turn_dicts(ticket, 1, last.at_turn),
        ]
        # The baseline context is the model-written one when it ran: the comparison a framework would make.
        baseline = model_contexts if model_rolling is not None else baseline_contexts
        result.outcomes = measure(
            _outcomes_client(),
            options.outcomes_model,
            questions_for(assembled[-1].pinned_state),
            {
                "full": full,
                "desk": contexts[len(applied) - 1][1],
                "baseline": baseline[len(applied) - 1][1],
            },
        )

    facts = expected_facts(doc)
    checks = check_facts(
        facts,
        state=state,
        summary=context.summary,
        summary_written_at=applied[-1].at_turn if applied else None,
        contexts=contexts,
    )
    transcript = [
        {
            "role": t["role"],
            "content": turn_text(role=t["role"], content=t["content"], tool=t["tool"], args=t["args"]),
        }
        for t in _turn_dicts(ticket, 1, len(doc.turns))
    ]
    written_at = applied[-1].at_turn if applied else None
    result.facts = check_baseline(
        checks,
        summary_text=latest,
        summary_written_at=written_at,
        contexts=baseline_contexts,
        transcript=transcript,
    )
    if model_rolling is not None:
        result.facts = check_baseline(
            result.facts,
            summary_text=model_rolling[-1] if model_rolling else None,
            summary_written_at=written_at,
            contexts=model_contexts,
            transcript=transcript,
            kind="model",
        )
    result.cost = ticket_cost(
        events=[
            {
                "number": e.number,
                "at_turn": e.at_turn,
                "tokens_before": e.tokens_before,
                "tokens_after": e.tokens_after,
                "summarizer_input_tokens": e.summarizer_input_tokens,
                "summarizer_output_tokens": e.summarizer_output_tokens,
                "latency_ms": e.latency_ms,
                "cost_usd": e.cost_usd,
            }
            for e in applied
        ],
        turns=list(
            Turn.objects.filter(ticket=ticket).order_by("number").values_list("number", "role", "tokens")
        ),
        prices=Prices(ticket_class.working_input_price, ticket_class.working_output_price),
    )
    brief = source_of(doc).get("brief") or []
    result.brief_sentences = len(brief)
    result.brief_stated = sum(1 for b in brief if b.get("stated_at_turn") is not None)
    result.money_state = {total: int(state.get(total) or 0) for total in MONEY_TOTALS}
    _money_independent(doc, ticket_class.tool_catalog, result)
    seen: set[tuple[str, str]] = set()
    for fact in facts:
        if fact.category == "actions_taken" and (fact.tool, fact.item) not in seen:
            seen.add((fact.tool, fact.item))
            result.probes.append(
                probe_repeat(ticket, tool=fact.tool, item=fact.item, amount_cents=fact.amount_cents)
            )


def domain_label(doc: ImportTicket) -> str:
    """'tau2-bench airline', 'tau-bench retail', ... or 'sundry-ticket' for the project's own format."""
    source = source_of(doc)
    if is_adapted(doc):
        return f"{source.get('format')} {source.get('domain') or 'unknown'}"
    return "sundry-ticket"


def evaluate_ticket(doc: ImportTicket, *, source: str, options: EvalOptions) -> TicketResult:
    """Import, compact and measure one ticket inside a savepoint that is always rolled back."""
    started = time.perf_counter()
    result = TicketResult(
        ticket_id=doc.ticket_id,
        source=source,
        domain=domain_label(doc),
        turns=len(doc.turns),
        ticket_class=doc.ticket_class.slug
        if isinstance(doc.ticket_class, ImportClass)
        else str(doc.ticket_class),
    )
    try:
        with transaction.atomic():
            ticket_class = _eval_class(doc, options)
            ticket_id = doc.ticket_id
            if Ticket.objects.filter(ticket_id=ticket_id).exists():  # already in the real database
                ticket_id = f"eval~{ticket_id}"[:64]
            imported = import_ticket_rolled_back(
                doc.model_copy(update={"ticket_id": ticket_id, "ticket_class": ticket_class.slug}),
                source=source,
            )
            result.scripted_refusals = imported.refused_as_expected
            _measure(doc, Ticket.objects.get(ticket_id=ticket_id), result, options)
            raise _RollBack
    except _RollBack:
        pass
    except (ImportFileError, DeskError) as exc:
        result.error = str(exc)
    result.seconds = time.perf_counter() - started
    return result


def evaluate(
    documents: Iterable[tuple[str, ImportTicket]],
    *,
    options: EvalOptions,
    progress: Callable[[int, TicketResult], None] | None = None,
) -> EvalReport:
    """Evaluate every ticket; the database is left exactly as it was."""
    report = EvalReport(options=options)
    started = time.perf_counter()
    with override_settings(TASKS=IMMEDIATE_TASKS):
        try:
            with transaction.atomic():
                for index, (source, doc) in enumerate(documents, start=1):
                    result = evaluate_ticket(doc, source=source, options=options)
                    report.tickets.append(result)
                    if progress is not None:
                        progress(index, result)
                raise _RollBack
        except _RollBack:
            pass
    report.seconds = time.perf_counter() - started
    return report


def _snapshot_state(event: CompactionEvent) -> dict[str, Any]:
    snapshot = getattr(event, "snapshot", None)  # a reverse one-to-one: AttributeError when there is none
    return snapshot.pinned_state if snapshot is not None else {}
