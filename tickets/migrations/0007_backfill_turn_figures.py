"""Fill the figures in force for turns stored before turns kept them (their fields read 0).

token_budget and threshold_tokens come from the ticket's class as it is now (the best record there is);
context_tokens is replayed from stored counts, as the desk assembles a request: the system prompt, the
pinned state as of the turn (the newest audit row at or before it), the summary active before the turn
(the newest applied or forced compaction at an earlier turn), the turns after the turns it replaced, and
the reply priming. Nothing is tokenized again. New turns store their own figures on insert.
"""

from __future__ import annotations

from itertools import accumulate

from django.db import migrations

# tickets.tokens.REPLY_PRIMING_TOKENS when this migration was written (frozen, as migrations must be).
REPLY_PRIMING_TOKENS = 3
BATCH = 500


def backfill(apps, schema_editor):  # type: ignore[no-untyped-def]
    Ticket = apps.get_model("tickets", "Ticket")
    Turn = apps.get_model("tickets", "Turn")
    StateChange = apps.get_model("tickets", "StateChange")
    CompactionEvent = apps.get_model("compaction", "CompactionEvent")
    ticket_ids = Turn.objects.filter(token_budget=0).values_list("ticket_id", flat=True).distinct()
    for ticket in Ticket.objects.filter(pk__in=list(ticket_ids)).select_related("ticket_class"):
        ticket_class = ticket.ticket_class
        budget = ticket_class.token_budget
        threshold = int(budget * ticket_class.compaction_threshold)
        turns = list(Turn.objects.filter(ticket=ticket).order_by("number"))
        tokens = {t.number: t.tokens for t in turns}
        last = max(tokens, default=0)
        prefix = [0, *accumulate(tokens.get(n, 0) for n in range(1, last + 1))]
        changes = list(
            StateChange.objects.filter(ticket=ticket).order_by("to_version").values_list("thread_turn", "after_tokens")
        )
        events = list(
            CompactionEvent.objects.filter(
                ticket=ticket, status__in=["applied", "forced"], last_replaced_turn__isnull=False
            )
            .order_by("at_turn")
            .values_list("at_turn", "last_replaced_turn", "summary_tokens")
        )
        state_tokens = 0
        change_index = 0
        active: tuple[int, int] | None = None  # (last replaced turn, summary tokens)
        event_index = 0
        changed = []
        for turn in turns:
            n = turn.number
            while change_index < len(changes) and changes[change_index][0] <= n:
                state_tokens = changes[change_index][1]
                change_index += 1
            while event_index < len(events) and events[event_index][0] < n:
                active = (events[event_index][1], events[event_index][2])
                event_index += 1
            first_active = active[0] + 1 if active else 1
            turn_tokens = prefix[n] - prefix[first_active - 1] if first_active <= n else 0
            if turn.token_budget:
                continue
            turn.token_budget = budget
            turn.threshold_tokens = threshold
            if not turn.context_tokens:
                turn.context_tokens = (
                    ticket.system_prompt_tokens
                    + state_tokens
                    + (active[1] if active else 0)
                    + turn_tokens
                    + REPLY_PRIMING_TOKENS
                )
            changed.append(turn)
        Turn.objects.bulk_update(changed, ["token_budget", "threshold_tokens", "context_tokens"], batch_size=BATCH)


class Migration(migrations.Migration):
    # Its place is right after 0005 (the turn fields); it follows 0006 only so the graph keeps one leaf.
    dependencies = [
        ("tickets", "0006_scripted_summarizer_backend"),
        ("compaction", "0003_compaction_claims_and_ceiling"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
