"""Clear answers to what cannot be shown: an unknown ticket gets the desk's own 404 page (in development
too), a date the metrics cannot read says so beside its field and which range is shown instead."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from tests.browser.desk_data import supervisor

pytestmark = pytest.mark.django_db


@pytest.fixture
def sam(client: Client) -> Client:
    client.force_login(supervisor())
    return client


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_ticket_gets_the_desks_404_with_a_search_box(sam: Client, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = sam.get("/tickets/T-NOPE-1/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'No ticket <span class="mono">T-NOPE-1</span>' in html
    # The search box asks the queue, with what was asked already in it; the queue is a link away.
    assert re.search(r'<form method="get" action="/"[^>]*role="search"', html)
    assert '<input type="search" name="q" id="not-found-q" value="T-NOPE-1"' in html
    assert '<a href="/">Back to the queue</a>' in html
    assert "URLconf" not in html  # not Django's debug page


def test_an_unknown_compaction_names_the_ticket_and_the_number(sam: Client) -> None:
    response = sam.get("/tickets/T-NOPE-2/compactions/9/")
    assert response.status_code == 404
    assert "compaction #9" in response.content.decode()


def test_a_path_nothing_answers_gets_the_desks_404(sam: Client) -> None:
    response = sam.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Nothing on the desk answers" in html and "/no-such-page/" in html


def test_the_api_keeps_its_json_404(sam: Client) -> None:
    response = sam.get("/api/v1/tickets/T-NOPE-3/")
    assert response.status_code in (401, 403, 404)
    assert response["Content-Type"].startswith("application/json")


def test_a_date_the_metrics_cannot_read_is_named_beside_its_field(sam: Client) -> None:
    response = sam.get("/metrics/", {"start": "garbage"})
    assert response.status_code == 400
    html = response.content.decode()
    field = re.search(r'<input type="date" name="start"[^>]*>', html)
    assert field is not None
    described = re.search(r'aria-describedby="([^"]+)"', field.group(0))
    assert described is not None
    # The id the field points to exists, and says what is wrong.
    assert re.search(
        rf'<ul class="errorlist" id="{described.group(1)}"><li>Enter a valid date.</li></ul>', html
    )
    assert "“From” garbage is not a date (use YYYY-MM-DD)" in html
    assert "The figures below are for the default range" in html


def test_a_good_range_shows_no_refusal(sam: Client) -> None:
    response = sam.get("/metrics/", {"start": "2026-11-01", "end": "2026-11-10"})
    assert response.status_code == 200
    assert 'id="range-refused"' not in response.content.decode()
