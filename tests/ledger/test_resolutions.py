"""A supervisor resolves a mismatch: adds the missed action, marks the action failed, or accepts it; audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.errors import InvalidInput
from core.vocabulary import ActorKind, StateOp
from desk.history import ticket_history
from ledger.models import LedgerResolution, Outcome, Reconciliation, Resolution
from ledger.selectors import ticket_ledger_counts
from ledger.services import reconcile_orders, resolve_ledger_mismatch
from tests.ledger.conftest import entry, ingest, refund
from tickets.models import PinnedState, StateChange, Ticket
from tickets.services.actors import Actor

pytestmark = pytest.mark.django_db


def as_supervisor(user: User) -> Actor:
    return Actor(kind=ActorKind.SUPERVISOR, user=user)


def state(ticket: Ticket) -> dict:
    return PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket).agent_json()


def test_adding_the_missed_action_records_it_through_the_correction_and_matches_the_entry(
    ticket: Ticket, sally: User
) -> None:
    ingest(entry("ev_9", amount_cents=2500, external_ref="re_77"))
    row = Reconciliation.objects.get(ticket=ticket)
    resolution = resolve_ledger_mismatch(
        ticket=ticket,
        reconciliation_id=row.pk,
        resolution=Resolution.ADDED_ACTION,
        reason="the agent refunded and the summary dropped it",
        by=as_supervisor(sally),
    )
    after = state(ticket)
    assert after["refunded_cents_total"] == 2500
    added = after["actions_taken"][-1]
    assert (added["tool"], added["amount_cents"], added["recorded_by"], added["external_ref"]) == (
        "issue_refund",
        2500,
        "supervisor",
        "re_77",
    )
    assert "from ledger entry ev_9" in added["reason"]
    change = StateChange.objects.filter(ticket=ticket).last()
    assert change is not None and (change.op, change.actor) == (StateOp.ACTION_ADDED, sally)
    assert (resolution.action_id, resolution.outcome, resolution.by) == (added["id"], "unrecorded", sally)
    assert list(Reconciliation.objects.values_list("outcome", "action_id")) == [("matched", added["id"])]
    assert ticket_ledger_counts(ticket)["unrecorded"] == 0


def test_marking_an_unconfirmed_action_failed_takes_it_out_of_the_totals(ticket: Ticket, sally: User) -> None:
    a1 = refund(ticket, "k1")
    reconcile_orders(order_ids=["SU-1"], now=timezone.now() + timedelta(hours=2))
    row = Reconciliation.objects.get(ticket=ticket, outcome=Outcome.UNCONFIRMED)
    resolve_ledger_mismatch(
        ticket=ticket,
        reconciliation_id=row.pk,
        resolution=Resolution.MARKED_FAILED,
        reason="the processor timed out; no refund reached the card",
        by=as_supervisor(sally),
    )
    after = state(ticket)
    assert after["refunded_cents_total"] == 0
    assert after["actions_taken"][0]["status"] == "failed"
    assert "no refund reached the card" in after["actions_taken"][0]["failure_reason"]
    assert not Reconciliation.objects.exists()
    audit = LedgerResolution.objects.get()
    assert (audit.action_id, audit.resolution, audit.reason) == (
        a1,
        "marked_failed",
        "the processor timed out; no refund reached the card",
    )


def test_accepting_keeps_the_outcome_off_the_open_counts_and_through_reconciling_again(
    ticket: Ticket, sally: User
) -> None:
    refund(ticket, "k1", amount_cents=4000)
    ingest(entry("ev_1", amount_cents=3900))
    row = Reconciliation.objects.get(ticket=ticket)
    resolve_ledger_mismatch(
        ticket=ticket,
        reconciliation_id=row.pk,
        resolution=Resolution.ACCEPTED,
        reason="the processor kept a $1 fee",
        by=as_supervisor(sally),
    )
    reconcile_orders(order_ids=["SU-1"])
    row.refresh_from_db()
    assert (row.outcome, row.accepted_by, row.accepted_reason) == (
        "amount_differs",
        sally,
        "the processor kept a $1 fee",
    )
    assert ticket_ledger_counts(ticket) == {
        "matched": 0,
        "unrecorded": 0,
        "unconfirmed": 0,
        "amount_differs": 0,
        "accepted": 1,
    }
    assert not Reconciliation.objects.open_mismatches().exists()


def test_a_resolution_needs_a_supervisor_a_reason_and_an_open_mismatch_of_the_right_kind(
    ticket: Ticket, sally: User
) -> None:
    ingest(entry("ev_9"))
    row = Reconciliation.objects.get(ticket=ticket)
    cases = [
        dict(resolution=Resolution.ACCEPTED, reason="  ", by=as_supervisor(sally)),
        dict(resolution=Resolution.ACCEPTED, reason="ok", by=Actor(kind=ActorKind.AGENT, user=sally)),
        dict(resolution=Resolution.MARKED_FAILED, reason="ok", by=as_supervisor(sally)),
        dict(resolution="delete", reason="ok", by=as_supervisor(sally)),
    ]
    for case in cases:
        with pytest.raises(InvalidInput):
            resolve_ledger_mismatch(ticket=ticket, reconciliation_id=row.pk, **case)
    assert not LedgerResolution.objects.exists()
    resolve_ledger_mismatch(
        ticket=ticket,
        reconciliation_id=row.pk,
        resolution=Resolution.ACCEPTED,
        reason="test entry",
        by=as_supervisor(sally),
    )
    with pytest.raises(InvalidInput, match="no open ledger mismatch"):
        resolve_ledger_mismatch(
            ticket=ticket,
            reconciliation_id=row.pk,
            resolution=Resolution.ACCEPTED,
            reason="again",
            by=as_supervisor(sally),
        )


def test_the_history_shows_the_mismatch_and_its_resolution(ticket: Ticket, sally: User, agent) -> None:
    ingest(entry("ev_9", amount_cents=2500))
    row = Reconciliation.objects.get(ticket=ticket)
    resolve_ledger_mismatch(
        ticket=ticket,
        reconciliation_id=row.pk,
        resolution=Resolution.ACCEPTED,
        reason="a test charge",
        by=as_supervisor(sally),
    )
    entries = ticket_history(ticket).entries
    ledger = [e for e in entries if e["kind"] == "ledger"]
    assert [e["detail"]["event"] for e in ledger] == ["resolution", "mismatch"]
    assert ledger[0]["by"] == {"kind": "supervisor", "username": "sally"}
    assert ledger[0]["detail"]["reason"] == "a test charge"
    assert "ev_9" in ledger[1]["summary"]
    api = agent.get("/api/v1/tickets/T-1/history/").json()
    assert [e["kind"] for e in api["results"]][:2] == ["ledger", "ledger"]
