"""Exports: the metrics per class and day as CSV over a date range, a ticket as one JSON document."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from compaction.models import CompactionEvent
from compaction.reviews import compaction_review_record
from tests.browser.desk_data import agent, import_seed_t40118, supervisor

pytestmark = pytest.mark.django_db


def test_metrics_csv_has_a_line_per_class_and_day_with_the_miss(sam: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    response = sam.get("/metrics.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["day", "ticket_class", "compactions", "failures", "misses", "tokens_saved", "cost_usd"]
    today = timezone.localdate().isoformat()
    (line,) = rows[1:]
    event = CompactionEvent.objects.get(status="applied")
    assert line[:5] == [today, "seed-8k", "1", "0", "1"]
    assert line[5] == str(event.tokens_saved) and line[6] == f"{event.cost_usd:.6f}"


def test_a_range_without_events_is_empty_and_a_backwards_range_is_refused(
    sam: Client, scenario: dict
) -> None:
    import_seed_t40118(scenario)
    past = timezone.localdate() - timedelta(days=40)
    rows = list(
        csv.reader(io.StringIO(sam.get("/metrics.csv", {"start": past, "end": past}).content.decode()))
    )
    assert len(rows) == 1
    assert sam.get("/metrics.csv", {"start": "2026-02-02", "end": "2026-01-01"}).status_code == 400
    assert sam.get("/metrics/", {"start": "nonsense"}).status_code == 400


def test_metrics_page_draws_a_chart_per_figure_and_counts_the_miss(
    sam: Client, scenario: dict, django_assert_num_queries: Any
) -> None:
    import_seed_t40118(scenario)
    # session, user, roles, figures, savings (compactions, working turns), days, refused repeats, ledger
    with django_assert_num_queries(9):
        html = sam.get("/metrics/").content.decode()
    for key in ("compactions", "failures", "misses", "tokens_saved", "cost_usd"):
        assert f'data-figure="{key}"' in html
    misses = html[html.index('data-figure="misses"') :]
    assert '<rect class="day-bar"' in misses[: misses.index("</figure>")]
    row = html[html.index('data-class="seed-8k"') :]
    assert '<span class="flag flag-miss">1</span>' in row[: row.index("</tr>")]


def test_ticket_export_holds_state_turns_events_reviews_and_changes(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    event = ticket.compactions.get(status="applied")
    compaction_review_record(event=event, by=supervisor("rita"), verdict="summary_bad", comment="lost A1")
    response = sam.get(f"/tickets/{ticket.ticket_id}/export.json")
    assert response.status_code == 200 and "T-40118.json" in response["Content-Disposition"]
    assert response.streaming
    doc = json.loads(response.getvalue())  # the streamed chunks, joined
    assert doc["format"] == "sundry-ticket-export/2"
    assert doc["state"]["refunded_cents_total"] == 4000
    assert len(doc["turns"]) == 26 and doc["turns"][21]["threshold_tokens"] == 6400
    (applied,) = [c for c in doc["compactions"] if c["status"] == "applied"]
    assert applied["reviews"][0]["verdict"] == "summary_bad"
    assert {"category": "actions_taken", "id": "A1"}.items() <= applied["coverage"]["missing"][0].items()
    assert doc["state_changes"][0]["op"] == "opened"


def test_exports_are_for_supervisors(client: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    client.force_login(agent())
    assert client.get("/tickets/T-40118/export.json").status_code == 403
    assert client.get("/metrics.csv").status_code == 403


def test_the_streamed_export_is_the_document_json_response_wrote(sam: Client, scenario: dict) -> None:
    """Byte for byte what the whole document, held in memory, gave JsonResponse (indent 2), empty lists `[]`
    included; written in chunks as the rows are read."""
    from django.db import connection
    from django.http import JsonResponse
    from django.test.utils import CaptureQueriesContext

    from desk.pages.ticket import export
    from tickets.models import Ticket
    from tickets.services.lifecycle import open_ticket

    ticket = import_seed_t40118(scenario)
    quiet = open_ticket(
        ticket_id="T-\u2011QUIET", order_id="SU-1", seller_type="x", ticket_class=ticket.ticket_class
    )
    for one in (ticket, quiet):
        one = Ticket.objects.select_related("ticket_class", "pinned_state").get(pk=one.pk)
        held = {k: list(v) if isinstance(v, export.Rows) else v for k, v in export.ticket_export(one).items()}
        expected = JsonResponse(held, json_dumps_params={"indent": 2}).content
        streamed = sam.get(f"/tickets/{one.ticket_id}/export.json").getvalue()
        assert streamed == expected
    assert b'"compactions": []' in streamed and b'"turns": []' in streamed
    with CaptureQueriesContext(connection) as queries, pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "BATCH", 5)
        patch.setattr(export, "CHUNK_BYTES", 100)
        response: Any = sam.get(f"/tickets/{ticket.ticket_id}/export.json")
        chunks = list(response.streaming_content)
    assert len(chunks) > 10 and json.loads(b"".join(chunks))["turns"][25]["number"] == 26
    # One statement per list, fetched in batches (a cursor's fetchmany; a server-side cursor on PostgreSQL).
    turn_reads = [q["sql"] for q in queries.captured_queries if 'FROM "tickets_turn"' in q["sql"]]
    assert len(turn_reads) == 1
