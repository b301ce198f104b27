"""The queue's keyset pages: cursors in the links, every ticket once in each sort, the same queries on any
page, filters kept, old page numbers and garbage cursors answered cleanly, the count capped."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from compaction.models import CompactionEvent
from compaction.queue_figures import ticket_figures_refresh
from core.vocabulary import CompactionStatus
from desk.pages import queue as queue_reads
from desk.pages.queue import QueueCount, parse_cursor
from tests.browser.desk_data import supervisor
from tests.desk.pages.test_queue import QUEUE_QUERIES
from tickets.models import PinnedState, Ticket, TicketClass, TicketStatus

pytestmark = pytest.mark.django_db

TICKETS = 230  # five pages of 50, the last one short
SORTS = ["recent", "tokens", "turns"]
KEYS = {"recent": ("pk",), "tokens": ("context_tokens", "pk"), "turns": ("turn_count", "pk")}


@pytest.fixture(scope="module")
def many_tickets(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """230 tickets shared by the module, rolled back after it: seven values of context tokens and
    five of turns, so ties cross every page boundary; every third escalated, every fourth with an
    unreviewed coverage miss, every fifth in a second class."""
    with django_db_blocker.unblock(), transaction.atomic():
        standard = TicketClass.objects.create(slug="pages-8k", token_budget=8000, compaction_threshold=0.8)
        small = TicketClass.objects.create(slug="pages-4k", token_budget=4000, compaction_threshold=0.75)
        tickets = Ticket.objects.bulk_create(
            Ticket(
                ticket_id=f"P-{i:04d}",
                order_id=f"SU-P{i:04d}",
                seller_type="marketplace",
                ticket_class=small if i % 5 == 0 else standard,
                status=TicketStatus.ESCALATED if i % 3 == 0 else TicketStatus.OPEN,
                system_prompt="p",
                system_prompt_tokens=5,
                context_tokens=(i % 7) * 100,
                turn_count=i % 5,
            )
            for i in range(TICKETS)
        )
        PinnedState.objects.bulk_create(PinnedState(ticket=t, data={}) for t in tickets)
        CompactionEvent.objects.bulk_create(
            CompactionEvent(
                ticket=t,
                number=1,
                at_turn=1,
                status=CompactionStatus.APPLIED,
                first_replaced_turn=1,
                last_replaced_turn=1,
                tokens_before=7000,
                tokens_after=1000,
                threshold_tokens=6400,
                coverage_missing_count=1,
            )
            for t in tickets[::4]
        )
        # Inserted in bulk: their stored figures filled as the compaction services would have kept them.
        ticket_figures_refresh(tickets=Ticket.objects.all())
        yield
        transaction.set_rollback(True)


@pytest.fixture
def sam(client: Client, many_tickets: None) -> Client:
    client.force_login(supervisor())
    return client


def expected_order(sort: str, tickets: Any = None) -> list[str]:
    rows = list(tickets if tickets is not None else Ticket.objects.all())
    rows.sort(key=lambda t: tuple(getattr(t, name) for name in KEYS[sort]), reverse=True)
    return [t.ticket_id for t in rows]


def listed(page_html: str) -> list[str]:
    return re.findall(r"data-row-link>([^<]+)</a>", page_html)


def link(page_html: str, name: str) -> str | None:
    found = re.search(r'<a href="([^"]*)" hx-get="([^"]*)"[^>]*data-page="' + name + '"', page_html)
    if found is None:
        return None
    assert found[1] == found[2], "the htmx link and the plain link go to the same page"
    url = html.unescape(found[1])
    return url if url.startswith("/") else "/" + url


def walk(client: Client, start: str, direction: str) -> list[list[str]]:
    """The pages met following `direction` links ("older" or "newer") from `start`."""
    pages: list[list[str]] = []
    url: str | None = start
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        pages.append(listed(body))
        url = link(body, direction)
        assert len(pages) <= TICKETS, "the links go round in a circle"
    return pages


@pytest.mark.parametrize("sort", SORTS)
def test_following_older_links_lists_every_ticket_once_in_the_sort_order(sam: Client, sort: str) -> None:
    """Ties on the sort key (33 tickets share each token count) are broken by the primary key."""
    pages = walk(sam, f"/?sort={sort}", "older")
    assert [len(p) for p in pages] == [50, 50, 50, 50, 30]
    assert [ticket for page in pages for ticket in page] == expected_order(sort)


@pytest.mark.parametrize("sort", SORTS)
def test_following_newer_links_from_the_last_page_lists_every_ticket_once(sam: Client, sort: str) -> None:
    """The last page is read from the other end, so it is full and the short page is the top one."""
    pages = walk(sam, f"/?sort={sort}&last=1", "newer")
    assert [len(p) for p in pages] == [50, 50, 50, 50, 30]
    assert [ticket for page in reversed(pages) for ticket in page] == expected_order(sort)


def test_newer_from_an_older_page_gives_back_the_page_before_it(sam: Client) -> None:
    first = sam.get("/?sort=tokens").content.decode()
    second = sam.get(link(first, "older")).content.decode()  # type: ignore[arg-type]
    assert listed(sam.get(link(second, "newer")).content.decode()) == listed(first)  # type: ignore[arg-type]


def test_the_first_page_has_no_newer_links_and_the_last_no_older_ones(sam: Client) -> None:
    first = sam.get("/").content.decode()
    assert link(first, "first") is None and link(first, "newer") is None
    assert link(first, "older") and link(first, "last") == "/?last=1"
    last = sam.get("/?last=1").content.decode()
    assert link(last, "older") is None and link(last, "last") is None
    assert link(last, "first") == "/" and link(last, "newer")


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("sort", SORTS)
def test_the_query_count_is_the_same_on_the_first_a_middle_and_the_last_page(sam: Client, sort: str) -> None:
    middle = expected_order(sort)[120]
    ticket = Ticket.objects.get(ticket_id=middle)
    cursor = queue_reads.cursor_of(ticket, sort)
    counts = {
        url: queries_for(sam, url)
        for url in [
            f"/?sort={sort}",
            f"/?sort={sort}&after={cursor}",
            f"/?sort={sort}&before={cursor}",
            f"/?sort={sort}&last=1",
        ]
    }
    assert set(counts.values()) == {QUEUE_QUERIES}, counts


def test_past_the_cap_every_page_still_costs_the_same_queries(
    sam: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate (PostgreSQL's planner figure) is one more query, on every page alike."""
    monkeypatch.setattr(queue_reads, "QUEUE_COUNT_CAP", 100)
    first = sam.get("/").content.decode()
    urls = ["/", link(first, "older"), "/?last=1"]
    counts = {queries_for(sam, url) for url in urls}  # type: ignore[arg-type]
    assert counts == {QUEUE_QUERIES + (1 if connection.vendor == "postgresql" else 0)}


def test_the_links_keep_the_filters_and_list_only_the_matching_tickets(
    sam: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "status=escalated&ticket_class=pages-8k&flags=coverage_miss&sort=turns"
    matching = Ticket.objects.filter(
        status=TicketStatus.ESCALATED,
        ticket_class__slug="pages-8k",
        compactions__coverage_missing_count__gt=0,
    )
    expected = expected_order("turns", matching)
    assert len(expected) > 0
    monkeypatch.setattr(queue_reads, "QUEUE_PAGE_SIZE", 5)  # 16 tickets match: four pages
    first = sam.get(f"/?{query}").content.decode()
    for name in ("older", "last"):
        url = link(first, name)
        assert url is not None and url.startswith(f"/?{query}&"), url
    pages = walk(sam, f"/?{query}", "older")
    backwards = walk(sam, f"/?{query}&last=1", "newer")
    assert [len(p) for p in pages] == [5, 5, 5, 1]
    assert [t for page in pages for t in page] == expected
    assert [t for page in reversed(backwards) for t in page] == expected
    assert f"{len(expected)} tickets" in first


def test_a_pager_link_followed_by_htmx_gets_the_fragment_and_pushes_its_url(sam: Client) -> None:
    first = sam.get("/?sort=tokens").content.decode()
    older = link(first, "older")
    assert older is not None
    response = sam.get(older, headers={"HX-Request": "true"})
    assert response.content.decode().lstrip().startswith('<section id="results">')
    assert response["HX-Push-Url"] == older


@pytest.mark.parametrize("page", ["2", "20", "last", "-1", "x" * 500])
def test_an_old_page_number_goes_to_the_first_page_with_the_filters(sam: Client, page: str) -> None:
    response = sam.get("/", {"page": page, "sort": "tokens", "status": "open"})
    assert response.status_code == 302
    assert response["Location"] == "/?sort=tokens&status=open"
    assert sam.get("/", {"page": page})["Location"] == "/"


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "",
        "1.2.3",
        "-5.7",
        "1e5.2",
        "٣٠٠.٤",  # digits int() would take, the database would not
        "9" * 19 + ".1",
        "9" * 18 + "." + "9" * 18,
        "x" * 41,
    ],
)
@pytest.mark.parametrize("param", ["after", "before"])
def test_a_garbage_cursor_gives_the_first_page(sam: Client, cursor: str, param: str) -> None:
    response = sam.get("/", {"sort": "tokens", param: cursor})
    assert response.status_code == 200
    assert listed(response.content.decode()) == expected_order("tokens")[:50]


def test_a_cursor_past_the_end_gives_the_first_page_and_one_before_the_end_the_last(sam: Client) -> None:
    assert listed(sam.get("/?sort=tokens&after=0.0").content.decode()) == expected_order("tokens")[:50]
    assert listed(sam.get("/?sort=tokens&before=0.0").content.decode()) == expected_order("tokens")[-50:]


def test_a_cursor_from_another_sort_gives_that_sorts_first_page(sam: Client) -> None:
    """`recent` cursors are one number, the others two: a sort changed by hand starts at the top."""
    response = sam.get("/", {"sort": "recent", "after": "300.12"})
    assert listed(response.content.decode()) == expected_order("recent")[:50]


def test_the_count_is_exact_up_to_the_cap(sam: Client) -> None:
    assert f"{TICKETS} tickets" in sam.get("/").content.decode()
    assert "1 ticket<" in sam.get("/", {"q": "P-0007"}).content.decode()


def test_past_the_cap_the_filtered_count_says_at_least_the_cap(
    sam: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_reads, "QUEUE_COUNT_CAP", 100)
    assert "100+ tickets" in sam.get("/", {"status": "open"}).content.decode()


def test_past_the_cap_the_whole_queue_shows_an_estimate(sam: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL's statistics give "about N" without counting; SQLite has none, so it says "N+"."""
    monkeypatch.setattr(queue_reads, "QUEUE_COUNT_CAP", 100)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE tickets_ticket")
        body = sam.get("/").content.decode()
        estimate = re.search(r"about ([\d,]+) tickets", body)
        assert estimate is not None, body
        assert int(estimate[1].replace(",", "")) > 100
    else:
        assert "100+ tickets" in sam.get("/").content.decode()


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (QueueCount(0), "0 tickets"),
        (QueueCount(1), "1 ticket"),
        (QueueCount(1000), "1,000 tickets"),
        (QueueCount(1000, kind="at_least"), "1,000+ tickets"),
        (QueueCount(100_000, kind="about"), "about 100,000 tickets"),
    ],
)
def test_the_count_says_how_sure_it_is(count: QueueCount, text: str) -> None:
    assert str(count) == text


def test_a_cursor_is_the_sort_key_and_the_primary_key() -> None:
    assert parse_cursor("98765", "recent") == (98765,)
    assert parse_cursor("4312.98765", "tokens") == (4312, 98765)
    assert parse_cursor("4312.98765", "recent") is None
    assert parse_cursor("98765", "turns") is None
