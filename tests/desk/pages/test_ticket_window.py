"""A long ticket's page stays cheap: a window of turns, a sampled chart, the newest compactions and
audit rows, with links (and htmx fragments) to the rest."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.vocabulary import ActorKind
from desk.pages.ticket import (
    AUDIT_WINDOW,
    CHART_COMPACTIONS,
    CHART_MAX_POINTS,
    COMPACTIONS_SHOWN,
    SERIES_FIELDS,
    STATUS_WINDOW,
    TIMELINE_WINDOW,
    sample_indices,
    sampled_series_rows,
    timeline_window,
)
from tests.browser.desk_data import supervisor
from tests.desk.pages.test_ticket_detail import DETAIL_QUERIES
from tests.factories import long_ticket
from tickets.models import RefusedAttempt, Ticket, TicketStatus, Turn
from tickets.services.actors import Actor
from tickets.services.lifecycle import set_ticket_status
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def t300() -> Ticket:
    """300 turns, an applied compaction every 50 (#1 at turn 50 ... #6 at turn 300)."""
    return long_ticket("T-300", 300)


def shown_turns(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<li class="turn [^"]*" id="turn-(\d+)"', html)]


def link(html: str, css_class: str) -> str:
    """The href of the first timeline pager link with that class (older, newer, newest)."""
    match = re.search(rf'<a href="([^"]*)" hx-get="([^"]*)"[^>]*class="{css_class}"', html)
    assert match, f"no {css_class} link"
    href, hx_get = match.groups()
    assert href == hx_get  # the same address with and without htmx
    return unescape(href)


# ---------------------------------------------------------------- the window, as plain numbers


def test_the_default_window_is_the_newest_turns() -> None:
    window = timeline_window(5000)
    assert (window.first, window.last) == (5000 - TIMELINE_WINDOW + 1, 5000)
    assert window.has_older and not window.has_newer


def test_before_and_after_page_by_a_whole_window_and_stop_at_the_ends() -> None:
    assert (timeline_window(5000, before=4971).first, timeline_window(5000, before=4971).last) == (4941, 4970)
    assert (timeline_window(5000, after=4970).first, timeline_window(5000, after=4970).last) == (4971, 5000)
    assert (timeline_window(5000, before=10).first, timeline_window(5000, before=10).last) == (1, 30)
    assert timeline_window(5000, after=10**6).last == 5000
    assert not timeline_window(5000, before=1).has_older


def test_a_turn_is_in_the_middle_of_its_window_or_at_an_end() -> None:
    assert 2500 in timeline_window(5000, turn=2500)
    assert timeline_window(5000, turn=2500).first == 2500 - TIMELINE_WINDOW // 2
    assert (timeline_window(5000, turn=3).first, timeline_window(5000, turn=3).last) == (1, 30)
    assert (timeline_window(5000, turn=10**9).first, timeline_window(5000, turn=10**9).last) == (4971, 5000)


def test_a_short_or_empty_ticket_is_one_window() -> None:
    assert (timeline_window(12).first, timeline_window(12).last) == (1, 12)
    assert not timeline_window(12).has_older and not timeline_window(12).has_newer
    assert timeline_window(0).last == 0 and not timeline_window(0).has_older


def test_sampling_keeps_the_ends_the_kept_points_and_every_stretch_peak() -> None:
    tokens = [i % 97 for i in range(5000)]  # a sawtooth: a peak every 97 points
    keep = list(range(10, 5000, 50))
    chosen = sample_indices(tokens, keep=keep, limit=300)
    assert len(chosen) <= 300 and chosen == sorted(set(chosen))
    assert {0, 4999} <= set(chosen) and set(keep) <= set(chosen)
    assert any(tokens[i] == 96 for i in chosen)
    assert sample_indices(tokens[:40], keep=[3], limit=300) == list(range(40))


def test_sampling_thins_the_kept_points_when_they_alone_would_not_fit() -> None:
    chosen = sample_indices([1] * 5000, keep=range(0, 5000, 7), limit=300)
    assert len(chosen) <= 300


def python_sample(ticket: Ticket, keep_turns: list[int], limit: int) -> list[tuple[int, ...]]:
    """What the chart sampled in Python from every turn (the short ticket's path): the reference."""
    rows = list(Turn.objects.filter(ticket=ticket).order_by("number").values_list(*SERIES_FIELDS))
    in_force = [(r[3], r[2]) for r in rows]
    changed = [i for i in range(1, len(rows)) if in_force[i] != in_force[i - 1]]
    keep = [i for i, r in enumerate(rows) if r[0] in set(keep_turns)]
    return [rows[i] for i in sample_indices([r[1] for r in rows], keep=[*keep, *changed], limit=limit)]


def jagged(ticket: Ticket) -> None:
    """Context sizes that are not a tidy sawtooth: equal peaks inside a bucket, a lone spike, a dip."""
    for n, tokens in ((7, 9000), (8, 9000), (301, 12), (455, 9001), (456, 9001), (999, 1)):
        Turn.objects.filter(ticket=ticket, number=n).update(context_tokens=tokens)


@pytest.mark.parametrize(
    ("turns", "compact_every", "limit"),
    [(1000, 50, 240), (1000, 3, 240), (241, 7, 240), (5000, 7, 240), (997, 1000, 13)],
)
def test_the_database_samples_a_long_ticket_as_the_python_sampler_does(
    turns: int, compact_every: int, limit: int
) -> None:
    ticket = long_ticket(f"T-S{turns}-{compact_every}", turns, compact_every=compact_every)
    jagged(ticket)
    keep = list(range(compact_every, turns + 1, compact_every))
    sampled = sampled_series_rows(ticket, keep_turns=keep, limit=limit)
    assert sampled is not None and len(sampled) <= limit
    assert sampled == python_sample(ticket, keep, limit)
    numbers = [row[0] for row in sampled]
    assert numbers[0] == 1 and numbers[-1] == turns
    if turns >= 1000:  # the spike is the highest point of its bucket whatever the bucket count
        assert 455 in numbers


def test_where_the_threshold_changed_the_sample_keeps_the_turn_and_stays_exact() -> None:
    ticket = long_ticket("T-SCH", 1200, compact_every=40)
    Turn.objects.filter(ticket=ticket, number__gte=700).update(threshold_tokens=5000)
    Turn.objects.filter(ticket=ticket, number__gte=1001).update(token_budget=9000)
    keep = list(range(40, 1201, 40))
    sampled = sampled_series_rows(ticket, keep_turns=keep, limit=240)
    assert sampled is not None and {700, 1001} <= {row[0] for row in sampled}
    assert sampled == python_sample(ticket, keep, 240)


def test_a_turn_stored_without_its_figures_sends_the_chart_back_to_every_turn() -> None:
    ticket = long_ticket("T-SLEG", 600)
    Turn.objects.filter(ticket=ticket, number=321).update(
        token_budget=0, threshold_tokens=0, context_tokens=0
    )
    assert sampled_series_rows(ticket, keep_turns=[], limit=240) is None


# ---------------------------------------------------------------- the page


@pytest.mark.parametrize("turns", [30, 300])
def test_the_page_costs_the_same_queries_at_30_and_300_turns(
    sam: Client, django_assert_num_queries: Any, turns: int
) -> None:
    ticket = long_ticket(f"T-{turns}", turns)
    with django_assert_num_queries(DETAIL_QUERIES):
        response = sam.get(f"/tickets/{ticket.ticket_id}/")
    assert response.status_code == 200
    assert len(shown_turns(response.content.decode())) == TIMELINE_WINDOW


def test_a_long_ticket_shows_only_its_newest_turns(sam: Client, t300: Ticket) -> None:
    html = sam.get("/tickets/T-300/").content.decode()
    assert shown_turns(html) == list(range(271, 301))
    assert "turn-300 says hello" in html and "turn-1 says hello" not in html
    assert "turns 271\u2013300 of 300" in html


def test_the_older_link_pages_back_to_the_first_turn(sam: Client, t300: Ticket) -> None:
    html = sam.get("/tickets/T-300/").content.decode()
    seen: list[int] = shown_turns(html)
    while 'class="older"' in html[: html.index('<ol class="timeline">')]:
        html = sam.get("/tickets/T-300/" + link(html, "older")).content.decode()
        seen = shown_turns(html) + seen
    assert seen == list(range(1, 301))  # every turn once, in order
    assert "turn-1 says hello" in html
    newer = sam.get("/tickets/T-300/" + link(html, "newer")).content.decode()
    assert shown_turns(newer) == list(range(31, 61))
    assert shown_turns(sam.get("/tickets/T-300/" + link(newer, "newest")).content.decode())[-1] == 300


def test_an_htmx_page_of_turns_is_the_timeline_alone_and_pushes_its_address(
    sam: Client, t300: Ticket
) -> None:
    response = sam.get("/tickets/T-300/?before=271", headers={"HX-Request": "true", "HX-Target": "timeline"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section class="card timeline-card" id="timeline">')
    assert "<html" not in html and "state-panel" not in html
    assert shown_turns(html) == list(range(241, 271))
    assert response["HX-Push-Url"] == "/tickets/T-300/?before=271"
    assert "HX-Target" in response["Vary"] and "HX-Request" in response["Vary"]


def test_a_compaction_marker_links_to_the_window_of_its_turn_and_to_its_review(
    sam: Client, t300: Ticket
) -> None:
    html = sam.get("/tickets/T-300/").content.decode()
    header = html[html.index('id="card-compactions"') : html.index("</dl>")]
    assert 'href="/tickets/T-300/?turn=100#compaction-2"' in header
    assert 'href="/tickets/T-300/compactions/2/"' in header
    assert 'id="compaction-2"' not in html  # turn 100 is not in the newest window
    window = sam.get("/tickets/T-300/?turn=100").content.decode()
    assert 100 in shown_turns(window)
    marker = window[window.index('id="compaction-2"') :]
    marker = marker[: marker.index("</li>")]
    assert "Compaction #2</b> after turn 100: turns" in marker
    assert 'href="/tickets/T-300/compactions/2/"' in marker


def test_a_replaced_turn_links_to_the_marker_of_the_compaction_that_replaced_it(
    sam: Client, t300: Ticket
) -> None:
    html = sam.get("/tickets/T-300/?turn=110").content.decode()  # turns 95-124
    turn110 = html[html.index('id="turn-110"') : html.index('id="turn-111"')]
    assert 'href="/tickets/T-300/?turn=150#compaction-3"' in turn110 and "replaced by #3" in turn110
    turn98 = html[html.index('id="turn-98"') : html.index('id="turn-99"')]
    assert 'href="#compaction-2"' in turn98  # its marker (turn 100) is on this page


def test_the_header_shows_the_newest_compactions_and_counts_the_rest(sam: Client) -> None:
    long_ticket("T-MANY", 300, compact_every=10)
    html = sam.get("/tickets/T-MANY/").content.decode()
    header = html[html.index('id="card-compactions"') : html.index("</dl>")]
    assert header.count('class="pill pill-') == 6
    assert "#30 applied" in header and "#25 applied" in header and "#24 applied" not in header
    assert "and 24 older" in header


def test_the_chart_of_a_long_ticket_draws_its_newest_compactions_sampled_and_links_to_the_older(
    sam: Client,
) -> None:
    """3,000 turns, a compaction every 50: the chart covers the turns after the compaction before its
    CHART_COMPACTIONS newest (#37 at 1850 to #60 at 3000), sampled, each drop at its turn, and says where the
    36 older ones are."""
    long_ticket("T-3000", 3000)
    html = sam.get("/tickets/T-3000/").content.decode()
    svg = html[html.index('<svg class="chart"') : html.index("</svg>")]
    dots = re.findall(r'<circle class="dot[^"]*"[^>]*data-turn="(\d+)"', svg)
    assert 2 < len(dots) <= CHART_MAX_POINTS
    first = 3000 - CHART_COMPACTIONS * 50 + 1  # the turn after compaction #36's
    assert f'data-points="{len(dots)}"' in svg and f'data-sampled="{3000 - first + 1}"' in svg
    drawn = [int(n) for n in re.findall(r'class="drop [^"]*" data-compaction="(\d+)"', svg)]
    assert drawn == list(range(61 - CHART_COMPACTIONS, 61))
    assert all(str(number * 50) in dots for number in drawn)
    assert {str(first), "3000"} <= set(dots) and min(int(d) for d in dots) == first
    assert 'class="dot over"' in svg  # the turns over the threshold before each drop are kept
    note = html[html.index('id="chart-note"') :]
    note = note[: note.index("</p>")]
    assert f"The newest turns, {first}\u20133000 of 3000" in note
    assert f"the {CHART_COMPACTIONS} newest compactions" in note
    assert f"{60 - CHART_COMPACTIONS} older compactions not drawn" in note
    assert f'href="/tickets/T-3000/?before={first}#timeline"' in note
    assert 'href="/tickets/T-3000/export.json"' in note


def markers(html: str) -> dict[str, int]:
    """What the page draws for compactions: the chart's drops (wide and narrow), the header's pills and the
    timeline's markers."""
    return {
        "drops": html.count('<g class="drop '),
        "pills": html.count('<span class="pill-pair">'),
        "timeline": len(re.findall(r'<li class="marker marker-[a-z_]+[^"]*" id="compaction-', html)),
    }


def test_what_the_page_reads_and_draws_does_not_grow_with_the_compactions(sam: Client) -> None:
    """3,000 turns with 30 compactions, and with 300 (bulk_create): the same queries, none of them reading
    the compactions without a LIMIT but the one aggregate, and the same drops and pills; the timeline marks
    the compactions of its window only."""
    seen: dict[int, tuple[list[str], dict[str, int], int]] = {}
    for every in (100, 10):
        ticket = long_ticket(f"T-C{every}", 3000, compact_every=every)
        with CaptureQueriesContext(connection) as queries:
            html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
        sqls = [q["sql"] for q in queries.captured_queries]
        seen[3000 // every] = (sqls, markers(html), len(html))
        reads = [sql for sql in sqls if 'FROM "compaction_compactionevent"' in sql]
        unbounded = [sql for sql in reads if "LIMIT" not in sql and "COUNT(" not in sql]
        assert not unbounded, unbounded
    (few_sql, few, few_size), (many_sql, many, many_size) = seen[30], seen[300]
    assert len(few_sql) == len(many_sql)
    assert few["drops"] == many["drops"] == 2 * CHART_COMPACTIONS
    assert few["pills"] == many["pills"] == COMPACTIONS_SHOWN
    assert few["timeline"] <= many["timeline"] <= TIMELINE_WINDOW
    assert many_size < 1.2 * few_size, (many_size, few_size)


def test_the_chart_of_a_short_ticket_draws_every_turn(sam: Client) -> None:
    long_ticket("T-40", 40, compact_every=20)
    svg = sam.get("/tickets/T-40/").content.decode()
    svg = svg[svg.index('<svg class="chart"') : svg.index("</svg>")]
    assert svg.count('<circle class="dot') == 40 and "data-sampled" not in svg


@pytest.mark.parametrize(
    "query",
    ["turn=abc", "turn=-1", "turn=0", "before=0", "after=x", "turn=99999999999999999999", "audit_before=v2"],
)
def test_a_bad_cursor_is_a_400(sam: Client, t300: Ticket, query: str) -> None:
    response = sam.get(f"/tickets/T-300/?{query}")
    assert response.status_code == 400
    assert "whole number" in response.content.decode()


@pytest.mark.parametrize(
    ("query", "first", "last"),
    [("turn=100000", 271, 300), ("before=1", 1, 30), ("after=100000", 271, 300), ("before=100000", 271, 300)],
)
def test_a_cursor_past_the_end_lands_on_the_window_at_that_end(
    sam: Client, t300: Ticket, query: str, first: int, last: int
) -> None:
    response = sam.get(f"/tickets/T-300/?{query}")
    assert response.status_code == 200
    assert shown_turns(response.content.decode()) == list(range(first, last + 1))


def test_a_refused_attempt_far_back_is_listed_in_the_header_and_shown_at_its_turn(
    sam: Client, t300: Ticket
) -> None:
    attempt = RefusedAttempt.objects.create(
        ticket=t300,
        actor_kind="agent",
        tool="issue_refund",
        item="lamp",
        amount_cents=1500,
        thread_turn=10,
        request={},
        earlier_action_id="A1",
        message="repeat of A1",
    )
    html = sam.get("/tickets/T-300/").content.decode()
    assert "marker-refused" not in html
    assert f'href="/tickets/T-300/?turn=10#refused-{attempt.pk}"' in html
    window = sam.get("/tickets/T-300/?turn=10").content.decode()
    assert f'id="refused-{attempt.pk}"' in window
    assert "refused: issue_refund 1500 cents for lamp — repeat of A1" in window


def test_a_pinned_item_links_to_the_window_of_its_turn(sam: Client, t300: Ticket) -> None:
    change_state(ticket=t300, op="constraint_stated", text="email only", at_turn=10)
    html = sam.get("/tickets/T-300/").content.decode()
    assert 'href="/tickets/T-300/?turn=10#turn-10"' in html[html.index('id="state-panel"') :]


def test_the_audit_trail_shows_the_newest_changes_and_pages_to_older_ones(sam: Client, t300: Ticket) -> None:
    for i in range(AUDIT_WINDOW + 5):
        change_state(ticket=t300, op="constraint_stated", text=f"constraint {i}", at_turn=1)
    version = Ticket.objects.get(pk=t300.pk).pinned_state.version
    html = sam.get("/tickets/T-300/").content.decode()
    rows = re.findall(r'<tr class="audit-[^"]*" data-version="(\d+)"', html)
    assert [int(v) for v in rows] == list(range(version, version - AUDIT_WINDOW, -1))
    oldest = version - AUDIT_WINDOW + 1
    assert f'href="?audit_before={oldest}#audit-trail"' in html
    response = sam.get(
        f"/tickets/T-300/?audit_before={oldest}", headers={"HX-Request": "true", "HX-Target": "audit-trail"}
    )
    fragment = response.content.decode()
    assert fragment.lstrip().startswith('<div class="table-scroll" id="audit-trail">')
    older = [int(v) for v in re.findall(r'data-version="(\d+)"', fragment)]
    assert older and max(older) == oldest - 1 and len(older) <= AUDIT_WINDOW
    assert "Newest changes" in fragment


def test_the_status_changes_show_the_newest_and_page_to_older_ones(sam: Client, t300: Ticket) -> None:
    by = Actor(kind=ActorKind.SUPERVISOR, user=supervisor("sue"))
    for i in range(STATUS_WINDOW + 3):
        status = TicketStatus.ESCALATED if i % 2 == 0 else TicketStatus.OPEN
        set_ticket_status(ticket=Ticket.objects.get(pk=t300.pk), status=status, by=by, reason=f"step {i}")
    html = sam.get("/tickets/T-300/").content.decode()
    audit = html[html.index('id="status-changes"') :]
    newest = re.findall(r'<tr data-status-change="(\d+)"', audit)
    assert len(newest) == STATUS_WINDOW and f"step {STATUS_WINDOW + 2}<" in audit and "step 3<" in audit
    assert "step 2<" not in audit
    older_href = unescape(re.search(r'<a href="([^"]*status_before=[^"]*)#status-trail"', audit).group(1))
    fragment = sam.get(
        "/tickets/T-300/" + older_href, headers={"HX-Request": "true", "HX-Target": "status-trail"}
    ).content.decode()
    assert fragment.lstrip().startswith('<section class="card status-card" id="status-trail">')
    older = re.findall(r'<tr data-status-change="(\d+)"', fragment)
    assert len(older) == 3 and not set(older) & set(newest)
    assert "step 0<" in fragment and "step 2<" in fragment and "step 3<" not in fragment
