"""The ticket queue at `/`: search, filters, budget bar, refunds, compactions, pagination, roles."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.browser.desk_data import admin, agent, import_lossy_t40118, import_t40118, supervisor
from tests.factories import chat
from tickets.models import RefusedAttempt, Ticket, TicketClass, TicketStatus
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db

# session + user + roles + classes for the filter + the count (capped) + one page of tickets (with their
# class, pinned state, compaction count and flags in the same query). Paging: test_queue_pages.py.
QUEUE_QUERIES = 6


def make_tickets(ticket_class: TicketClass, count: int, *, start: int = 0) -> list[Ticket]:
    tickets = []
    for i in range(start, start + count):
        ticket = open_ticket(
            ticket_id=f"T-{7000 + i}",
            order_id=f"SU-{8000 + i}",
            seller_type="marketplace",
            ticket_class=ticket_class,
        )
        chat(ticket, 2)
        record_action(
            ticket=ticket, tool="issue_refund", item="kettle", amount_cents=1500, idempotency_key=f"k{i}"
        )
        tickets.append(ticket)
    return tickets


@pytest.mark.parametrize("count", [3, 30])
def test_queue_query_count_does_not_grow_with_the_tickets(
    sam: Client, standard_class: TicketClass, django_assert_num_queries: Any, count: int
) -> None:
    """Each row's refund, compaction count and flags come with the page query: no per-row queries."""
    make_tickets(standard_class, count)
    with django_assert_num_queries(QUEUE_QUERIES):
        response = sam.get("/")
    assert response.status_code == 200
    assert response.content.count(b"data-row-link") == count


def test_queue_row_shows_budget_bar_refunded_total_and_compaction_count(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    html = sam.get("/").content.decode()
    assert "T-40118" in html and "SU-87310" in html
    assert "$40.00" in html  # refunded total, derived from the pinned actions
    assert 'class="bar bar-ok"' in html
    assert "692 / 8000" in html or "/ 8000" in html
    row = html[html.index("T-40118") :]
    # one applied compaction
    assert '<td class="num compactions" data-label="Compactions">1</td>' in row[: row.index("</tr>")]


def test_search_finds_a_ticket_by_ticket_id_or_order_id(sam: Client, standard_class: TicketClass) -> None:
    make_tickets(standard_class, 3)
    by_ticket = sam.get("/", {"q": "t-7001"}).content.decode()
    assert "T-7001" in by_ticket and "T-7002" not in by_ticket
    by_order = sam.get("/", {"q": "SU-8002"}).content.decode()
    assert "T-7002" in by_order and "T-7001" not in by_order


def test_filters_by_class_and_status(sam: Client, standard_class: TicketClass) -> None:
    small = TicketClass.objects.create(slug="small-4k", token_budget=4000, compaction_threshold=0.75)
    make_tickets(standard_class, 2)
    [other] = make_tickets(small, 1, start=10)
    Ticket.objects.filter(pk=other.pk).update(status=TicketStatus.ESCALATED)
    by_class = sam.get("/", {"ticket_class": "small-4k"}).content.decode()
    assert "T-7010" in by_class and "T-7000" not in by_class
    by_status = sam.get("/", {"status": "escalated"}).content.decode()
    assert "T-7010" in by_status and "T-7001" not in by_status


def test_coverage_miss_flag_filters_to_the_lossy_ticket(
    sam: Client, scenario: dict, openai_server: Any
) -> None:
    import_lossy_t40118(scenario, openai_server)
    make_tickets(TicketClass.objects.get(slug="standard-8k"), 2)
    flagged = sam.get("/", {"flags": "coverage_miss"}).content.decode()
    assert "T-40118" in flagged and "T-7000" not in flagged
    assert "coverage miss" in flagged
    assert "T-40118" not in sam.get("/", {"flags": "failed"}).content.decode()


def test_an_htmx_request_gets_only_the_results_fragment(sam: Client, standard_class: TicketClass) -> None:
    make_tickets(standard_class, 2)
    response = sam.get("/", {"q": "T-7001"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="results">')
    assert "<html" not in html and "T-7001" in html
    assert "HX-Request" in response["Vary"]
    assert response["HX-Push-Url"] == "/?q=T-7001"


def test_anonymous_users_are_sent_to_the_login_page(client: Client) -> None:
    response = client.get("/tickets/T-1/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/tickets/T-1/")


def test_an_agent_account_gets_403_on_every_page(client: Client, scenario: dict) -> None:
    """Agents have unusable passwords; a logged-in agent session is refused anyway."""
    import_t40118(scenario)
    client.force_login(agent())
    for url in [
        "/",
        "/tickets/T-40118/",
        "/tickets/T-40118/compactions/2/",
        "/tickets/T-40118/replay/?turn=3",
        "/metrics/",
        "/classes/",
    ]:
        assert client.get(url).status_code == 403, url
    assert client.post("/tickets/T-40118/state/", {"op": "constraint_stated"}).status_code == 403


def test_an_agent_cannot_log_in_with_any_password(client: Client) -> None:
    agent("agent-9")
    response = client.post("/accounts/login/", {"username": "agent-9", "password": ""})
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_supervisors_log_in_and_see_the_queue(client: Client) -> None:
    supervisor("sally")
    response = client.post("/accounts/login/", {"username": "sally", "password": "desk-test-password"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_only_admins_reach_the_classes_page(client: Client, standard_class: TicketClass) -> None:
    client.force_login(supervisor())
    assert client.get("/classes/").status_code == 403
    client.force_login(admin())
    html = client.get("/classes/").content.decode()
    assert "standard-8k" in html and "6400" in html


def test_the_deferred_flag_shows_while_the_newest_compaction_event_is_a_deferral(
    sam: Client, standard_class: TicketClass
) -> None:
    """A ticket waiting for its next boundary is flagged; one compacted since its deferral is not."""
    from compaction.models import CompactionEvent
    from compaction.queue_figures import ticket_figures_refresh
    from core.vocabulary import CompactionStatus

    waiting, done = make_tickets(standard_class, 2)
    # Three events per ticket, the other ticket's first: no event id lines up with a ticket id.
    events = [
        (done, 1, CompactionStatus.APPLIED),
        (done, 2, CompactionStatus.DEFERRED),
        (done, 3, CompactionStatus.APPLIED),
        (waiting, 1, CompactionStatus.APPLIED),
        (waiting, 2, CompactionStatus.APPLIED),
        (waiting, 3, CompactionStatus.DEFERRED),
    ]
    for ticket, number, status in events:
        replaced = {"first_replaced_turn": 1, "last_replaced_turn": 1} if status == "applied" else {}
        CompactionEvent.objects.create(
            ticket=ticket,
            number=number,
            at_turn=number,
            status=status,
            tokens_before=7000,
            threshold_tokens=6400,
            **replaced,
        )
    # Made by hand, as the compaction services would have written them: their figures stored as those do.
    ticket_figures_refresh(tickets=Ticket.objects.filter(pk__in=[waiting.pk, done.pk]))
    html = sam.get("/").content.decode()
    rows = {t.ticket_id: html[html.index(t.ticket_id) :][:3000] for t in (waiting, done)}
    assert "flag-deferred" in rows[waiting.ticket_id].split("</tr>")[0]
    assert "flag-deferred" not in rows[done.ticket_id].split("</tr>")[0]


def test_a_ticket_whose_state_alone_fills_the_threshold_is_flagged_and_filtered(sam: Client) -> None:
    """The flag the turn answer's state_over_threshold gives an agent, on the queue for supervisors."""
    tiny = TicketClass.objects.create(slug="tiny-512", token_budget=512, compaction_threshold=0.5)
    full, roomy = (
        open_ticket(ticket_id=tid, order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
        for tid in ("T-FULL", "T-ROOMY")
    )
    n = 0
    while full.context_tokens < 260:  # the state alone past the 256-token threshold: no turns at all
        change_state(ticket=full, op="constraint_stated", text=f"refund to the original card only ({n})")
        n += 1
    html = sam.get("/").content.decode()
    assert "state over threshold" in html[html.index("T-FULL") :].split("</tr>")[0]
    assert "state over threshold" not in html[html.index("T-ROOMY") :].split("</tr>")[0]
    filtered = sam.get("/", {"flags": "state_over_threshold"}).content.decode()
    assert "T-FULL" in filtered and "T-ROOMY" not in filtered
    assert roomy.context_tokens < 256


def test_a_queue_row_reads_its_stored_refund_total_not_its_state(
    sam: Client, standard_class: TicketClass
) -> None:
    """The page query takes the refund total from the stored agent-facing state: no row's items are read; a
    state with none stored is still shown its total (its items come with the page query, for that row only)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tickets.models import PinnedState

    _, second = make_tickets(standard_class, 2)
    with CaptureQueriesContext(connection) as queries:
        html = sam.get("/").content.decode()
    page = [q["sql"] for q in queries.captured_queries if '"tickets_ticket"."ticket_id"' in q["sql"]]
    # The items are named only as the fallback of a row with no current stored state.
    column = '"tickets_pinnedstate"."data"'
    assert page and all(sql.count(column) == sql.count(f"ELSE {column}") for sql in page)
    assert html.count("$15.00") == 2
    PinnedState.objects.filter(ticket=second).update(served_version=None)
    with CaptureQueriesContext(connection) as again:
        assert sam.get("/").content.decode().count("$15.00") == 2
    assert len(again.captured_queries) == len(queries.captured_queries)


@pytest.mark.parametrize(
    "query",
    ["", "flags=needs_review", "flags=coverage_miss&flags=forced&flags=failed", "flags=refused_repeats"],
)
def test_a_queue_row_reads_its_stored_compaction_figures_not_its_events(
    sam: Client, standard_class: TicketClass, query: str
) -> None:
    """No query of the page, filtered by the event flags or not, reads compaction events or refusals: the
    rows and the filters read the ticket's stored figures; the page costs what it did."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from compaction.models import CompactionEvent, CompactionReview

    make_tickets(standard_class, 3)
    with CaptureQueriesContext(connection) as queries:
        assert sam.get(f"/?{query}").status_code == 200
    assert len(queries.captured_queries) <= QUEUE_QUERIES
    sql = "\n".join(q["sql"] for q in queries.captured_queries)
    assert '"tickets_ticket"."compaction_count"' in sql and '"tickets_ticket"."needs_review"' in sql
    for model in (CompactionEvent, CompactionReview, RefusedAttempt):
        assert model._meta.db_table not in sql
