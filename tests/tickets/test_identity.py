"""One identity per action however it is spelled, and the class's tool catalog (pure: no database)."""

from __future__ import annotations

import pytest

from core.identity import CatalogError, ToolCatalog, action_identity, normalize_name


@pytest.mark.parametrize(
    "spelling",
    [
        "garden-table",
        "Garden-Table",
        "garden\u200b-table",
        "garden_table",
        "GARDEN TABLE",
        "  garden -_ table  ",
        "garden\u2060-table",
        "\ufeffgarden-table",
        "garden\x00-\x07table",
        "garden\ttable",
        "\uff47\uff41\uff52\uff44\uff45\uff4e\uff0d\uff54\uff41\uff42\uff4c\uff45",  # full-width forms
    ],
)
def test_every_spelling_of_one_item_has_one_identity(spelling: str) -> None:
    assert normalize_name(spelling) == normalize_name("garden-table") == "garden_table"


def test_different_items_stay_different() -> None:
    assert normalize_name("garden-table") != normalize_name("garden-tables")
    assert normalize_name("gardentable") != normalize_name("garden-table")


def test_case_folding_goes_beyond_lower() -> None:
    assert normalize_name("STRASSE") == normalize_name("Straße")


def test_action_identity_normalizes_tool_and_item() -> None:
    assert action_identity("Issue_Refund", "Garden-Table") == action_identity("issue-refund", "garden_table")
    assert action_identity("issue_refund", "") == ("issue_refund", "")


def test_the_default_catalog_knows_common_refund_cancel_and_tau_tools() -> None:
    tools = ToolCatalog.default()
    for tool in [
        "issue_refund",
        "Issue-Refund",
        "refund",
        "partial_refund",
        "refund_order",
        "cancel_subscription",
        "cancel_pending_order",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
        "modify_pending_order_items",
        "cancel_reservation",
        "update_reservation_flights",
        "book_reservation",
        "send_certificate",
    ]:
        assert tools.is_irreversible(tool), tool
    for tool in ["lookup_order", "get_order_details", "track_parcel", "send_message", "apply_restocking_fee"]:
        assert not tools.is_irreversible(tool), tool


@pytest.mark.parametrize(
    ("tool", "effect"),
    [
        ("issue_refund", "refund"),
        ("Partial Refund", "refund"),
        ("cancel_pending_order", "refund"),
        ("return_delivered_order_items", "refund"),
        ("cancel_reservation", "refund"),
        ("book_reservation", "charge"),
        ("update_reservation_baggages", "charge"),
        ("send_certificate", "credit"),
        ("lookup_order", None),
        ("restocking_fee", None),
        ("exchange_delivered_order_items", None),
    ],
)
def test_money_effects_of_the_default_catalog(tool: str, effect: str | None) -> None:
    assert ToolCatalog.default().money_effect(tool) == effect


def test_a_class_catalog_matches_globs_on_normalized_names() -> None:
    tools = ToolCatalog.build(irreversible=["Wire-*"], money={"wire_*": "charge", "Wire Refund": "refund"})
    assert tools.is_irreversible("wire_transfer") and tools.is_irreversible("WIRE-refund")
    assert not tools.is_irreversible("issue_refund")  # the class replaced the defaults
    assert tools.money_effect("wire-refund") == "refund"  # an exact name wins over a glob
    assert tools.money_effect("wire_transfer") == "charge"


@pytest.mark.parametrize(
    ("irreversible", "money", "message"),
    [
        ("issue_refund", {}, "JSON list"),
        ([1], {}, "JSON list"),
        ([], ["issue_refund"], "JSON object"),
        ([], {"issue_refund": "payout"}, "refund, charge, credit"),
        ([], {"  ": "refund"}, "needs a name"),
    ],
)
def test_a_catalog_that_is_not_one_is_refused_saying_why(
    irreversible: object, money: object, message: str
) -> None:
    with pytest.raises(CatalogError, match=message):
        ToolCatalog.build(irreversible=irreversible, money=money)
