"""A turn appended in one statement on PostgreSQL (tickets.services.turns): the key's lock, its first turn, the
ticket's row and figures and the turn's row together, and what a second session sees meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DataError, connections, transaction

from tickets.errors import IdempotencyKeyInFlight, IdempotencyKeyReused
from tickets.models import Ticket, TicketClass, Turn
from tickets.services.lifecycle import open_ticket
from tickets.services.turns import TurnAppended, append_turn, append_turn_up_to

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ticket(transactional_db: None) -> Ticket:
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    return open_ticket(ticket_id="T-AP", order_id="SU-1", seller_type="x", ticket_class=klass)


def api_turn(ticket: Ticket, key: str, content: str = "Where is my parcel?") -> TurnAppended:
    """As the API appends (a key still in flight is refused at once), in a transaction of its own."""
    with transaction.atomic():
        return append_turn(
            ticket=ticket, role="customer", content=content, idempotency_key=key, refuse_in_flight=True
        )


def waiting_on_a_lock() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


class Holder:
    """A second session that runs `first` in a transaction and keeps it open until released."""

    def __init__(self, first: Callable[[], Any]) -> None:
        self.done, self.release = threading.Event(), threading.Event()
        self.results: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(first,))

    def _run(self, first: Callable[[], Any]) -> None:
        try:
            with transaction.atomic():
                self.results.append(first())
                self.done.set()
                self.release.wait(timeout=30)
        except BaseException as exc:  # seen by the test
            self.results.append(exc)
        finally:
            self.done.set()
            connections.close_all()

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.done.wait(timeout=10) and self.results, self.results
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(timeout=30)


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # seen by the test
            out.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def until(condition: Callable[[], bool]) -> Iterator[None]:
    for _ in range(2000):
        if condition():
            return
        yield
        threading.Event().wait(0.01)


def wait_for(condition: Callable[[], bool]) -> None:
    for _ in until(condition):
        pass
    assert condition()


def test_the_turn_row_and_the_ticket_figures_are_written_together(ticket: Ticket) -> None:
    before = Ticket.objects.get(pk=ticket.pk).context_tokens  # the system prompt and the empty state
    with transaction.atomic():
        appended = append_turn(
            ticket=ticket, role="tool_call", tool="track_parcel", args={"parcel": "P-1"}, tool_call_id="c1"
        )
    stored = Turn.objects.get(ticket=ticket)
    assert (appended.turn.pk, appended.turn.number) == (stored.pk, 1)
    assert stored.args == {"parcel": "P-1"} and stored.extra == {} and stored.created_at is not None
    assert (stored.token_budget, stored.threshold_tokens) == (8000, 6400)
    fresh = Ticket.objects.get(pk=ticket.pk)
    assert fresh.turn_count == 1 and fresh.context_tokens == stored.context_tokens == ticket.context_tokens
    assert stored.context_tokens == before + stored.tokens


def test_a_value_too_long_for_its_column_is_refused_not_cut(ticket: Ticket) -> None:
    with pytest.raises(DataError), transaction.atomic():
        append_turn(ticket=ticket, role="tool_call", tool="t" * 101)
    assert not Turn.objects.filter(ticket=ticket).exists()
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 0


def test_a_retry_gets_the_first_turn_whole_and_another_body_is_refused(ticket: Ticket) -> None:
    with transaction.atomic():
        first = append_turn(
            ticket=ticket, role="tool_call", tool="track_parcel", args={"parcel": "P-1"}, idempotency_key="k"
        )
    with transaction.atomic():
        again = append_turn(
            ticket=ticket,
            role="tool_call",
            tool="track_parcel",
            args={"parcel": "P-1"},
            idempotency_key="k",
            refuse_in_flight=True,
        )
    assert again.replayed and again.turn.pk == first.turn.pk
    assert again.turn.args == {"parcel": "P-1"} and again.turn.created_at == first.turn.created_at
    with pytest.raises(IdempotencyKeyReused):
        api_turn(ticket, "k", content="something else")
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 1


def test_a_key_still_in_flight_is_refused_at_once_then_replayed(ticket: Ticket) -> None:
    with Holder(lambda: api_turn(ticket, "k-1")) as first, pytest.raises(IdempotencyKeyInFlight):
        api_turn(ticket, "k-1")
    [stored] = first.results
    again = api_turn(ticket, "k-1")
    assert again.replayed and again.turn.pk == stored.turn.pk
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 1


def test_a_same_key_turn_committed_after_the_statement_began_is_replayed_not_stored_twice(
    ticket: Ticket,
) -> None:
    """The first turn is stored by a session that does not take the key's lock (it waits on the ticket row
    instead): the second statement's snapshot misses it, its update waits for the row, then finds the turn
    count moved, writes nothing, and runs again to find the first turn."""

    def waiting_kind() -> TurnAppended:
        return append_turn(
            ticket=ticket, role="customer", content="Where is my parcel?", idempotency_key="k-1"
        )

    with Holder(waiting_kind) as first:
        thread, second = in_thread(lambda: api_turn(ticket, "k-1"))
        wait_for(lambda: waiting_on_a_lock() == 1)
    thread.join(timeout=30)
    [stored], [answer] = first.results, second
    assert isinstance(answer, TurnAppended), answer
    assert answer.replayed and answer.turn.pk == stored.turn.pk
    assert Turn.objects.filter(ticket=ticket).count() == 1
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 1


def test_a_turn_with_another_key_waits_for_the_ticket_row_and_takes_the_next_number(ticket: Ticket) -> None:
    with Holder(lambda: api_turn(ticket, "k-1")):
        thread, second = in_thread(lambda: api_turn(ticket, "k-2", content="And my refund?"))
        wait_for(lambda: waiting_on_a_lock() == 1)
    thread.join(timeout=30)
    [answer] = second
    assert isinstance(answer, TurnAppended), answer
    assert not answer.replayed and answer.turn.number == 2
    turns = list(Turn.objects.filter(ticket=ticket).order_by("number"))
    assert [t.idempotency_key for t in turns] == ["k-1", "k-2"]
    assert turns[1].context_tokens == turns[0].context_tokens + turns[1].tokens
    fresh = Ticket.objects.get(pk=ticket.pk)
    assert (fresh.turn_count, fresh.context_tokens) == (2, turns[1].context_tokens)


def test_on_its_own_a_turn_is_appended_only_up_to_the_ceiling(ticket: Ticket) -> None:
    """Outside any transaction: a turn that would pass the ceiling writes nothing (None: the caller takes the
    transaction), whether the caller's ticket shows it or only the row does."""
    size = Ticket.objects.get(pk=ticket.pk).context_tokens
    first = append_turn_up_to(ticket=ticket, up_to_tokens=size + 1000, role="customer", content="Hello")
    assert first is not None and first.turn.number == 1 and first.turn.pk is not None
    assert ticket.context_tokens == first.turn.context_tokens == Turn.objects.get().context_tokens
    assert (
        append_turn_up_to(ticket=ticket, up_to_tokens=ticket.context_tokens, role="agent", content="Hi")
        is None
    )
    stale = Ticket.objects.get(pk=ticket.pk)
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=size + 1000)  # as another writer would
    assert append_turn_up_to(ticket=stale, up_to_tokens=size + 1000, role="agent", content="Hi") is None
    assert Turn.objects.count() == 1 and Ticket.objects.get(pk=ticket.pk).turn_count == 1


def test_on_its_own_a_keyed_turn_is_replayed_or_refused_as_in_a_transaction(ticket: Ticket) -> None:
    def on_its_own() -> TurnAppended | None:
        return append_turn_up_to(
            ticket=ticket, up_to_tokens=10_000, role="customer", content="Hello", idempotency_key="k-1"
        )

    with (
        Holder(lambda: api_turn(ticket, "k-1", content="Hello")) as first,
        pytest.raises(IdempotencyKeyInFlight),
    ):
        on_its_own()
    again = on_its_own()
    assert again is not None and again.replayed and again.turn.pk == first.results[0].turn.pk
    with pytest.raises(IdempotencyKeyReused):
        append_turn_up_to(
            ticket=ticket, up_to_tokens=10_000, role="customer", content="Bye", idempotency_key="k-1"
        )
