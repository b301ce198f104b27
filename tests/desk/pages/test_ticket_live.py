"""The ticket page's live poll: conditional on an ETag (304 while nothing is new), then the turns,
compactions and refused attempts newer than the marks the page was drawn with."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from desk.pages.ticket.live import LIVE_COMPACTIONS_SHOWN
from desk.turns import receive_turn
from tests.browser.desk_data import import_seed_t40118
from tests.factories import long_ticket
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def poll_address(page_html: str) -> str:
    found = re.search(r'id="live"[^>]*hx-get="([^"]+)"', page_html.replace("\n", " "))
    assert found is not None
    return found.group(1).replace("&amp;", "&")


def test_the_poll_is_304_until_something_arrives_then_shows_it(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario, until=20)
    address = poll_address(sam.get(ticket.get_absolute_url()).content.decode())
    assert address == f"/tickets/{ticket.ticket_id}/live/?turn=20&compaction=0&refused=0"

    quiet = sam.get(address)
    assert quiet.status_code == 200 and 'id="live-news"' not in quiet.content.decode()
    assert quiet["Cache-Control"] == "private, no-cache"
    tag = quiet["ETag"]
    unchanged = sam.get(address, headers={"If-None-Match": tag})
    assert unchanged.status_code == 304 and unchanged.content == b""

    receive_turn(ticket=Ticket.objects.get(pk=ticket.pk), role="customer", content="Any news on the parasol?")
    news = sam.get(address, headers={"If-None-Match": tag})
    assert news.status_code == 200 and news["ETag"] != tag
    html = news.content.decode()
    assert "New since you opened" in html and "1 turn" in html
    assert '<li class="turn role-customer" data-live-turn="21">' in html
    assert "Any news on the parasol?" in html
    assert sam.get(address, headers={"If-None-Match": news["ETag"]}).status_code == 304


def test_a_compaction_and_a_refusal_after_opening_are_news(sam: Client, scenario: dict) -> None:
    """Marks of a page opened at turn 21 (after the deferred compaction #1), polled once the seed's
    compaction #2 at turn 22 and its refused second refund at turn 26 are in."""
    ticket = import_seed_t40118(scenario)
    html = sam.get(f"/tickets/{ticket.ticket_id}/live/?turn=21&compaction=1&refused=0").content.decode()
    assert "5 turns" in html and "(#22\N{EN DASH}#26)" in html
    assert "#2 applied at turn 22" in html and "#1 deferred" not in html
    assert "refused: issue_refund" in html
    assert [int(n) for n in re.findall(r'data-live-turn="(\d+)"', html)] == [22, 23, 24, 25, 26]


@pytest.mark.parametrize(
    "query", ["turn=x&compaction=0&refused=0", "turn=1&compaction=-1&refused=0", "turn=1"]
)
def test_bad_marks_are_a_400(sam: Client, scenario: dict, query: str) -> None:
    ticket = import_seed_t40118(scenario, until=2)
    response = sam.get(f"/tickets/{ticket.ticket_id}/live/?{query}")
    assert response.status_code == 400
    assert "Bad live marks" in response.content.decode()


def test_a_poll_with_old_marks_lists_the_newest_compactions_and_counts_the_rest(sam: Client) -> None:
    """Marks from before 60 compactions (bulk_create): the news lists the newest LIVE_COMPACTIONS_SHOWN of
    them, oldest first, and counts all 60, in a bounded read."""
    ticket = long_ticket("T-LIVE", 3000, compact_every=50)
    html = sam.get(f"/tickets/{ticket.ticket_id}/live/?turn=3000&compaction=0&refused=0").content.decode()
    listed = [int(n) for n in re.findall(r"#(\d+) applied at turn", html)]
    assert listed == list(range(61 - LIVE_COMPACTIONS_SHOWN, 61))
    assert "· 60 compactions" in html
