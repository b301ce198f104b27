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
    # The class replaced the defaults: issue_refund is not listed, but its name says refund, so it is money
    # (and irreversible) until an admin classifies it; classified as no money (null), it is neither.
    assert tools.is_unclassified_money("issue_refund") and tools.is_irreversible("issue_refund")
    classified = ToolCatalog.build(irreversible=[], money={"issue_refund": None})
    assert not classified.is_irreversible("issue_refund") and classified.money_effect("issue_refund") is None
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


def test_every_unicode_dash_and_minus_is_a_separator() -> None:
    import sys
    import unicodedata

    from core.identity import DASH_CODE_POINTS

    dashes = {cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Pd"}
    assert dashes <= set(DASH_CODE_POINTS)
    for cp in [*DASH_CODE_POINTS]:
        assert normalize_name(f"garden{chr(cp)}table") == "garden_table", hex(cp)


@pytest.mark.parametrize(
    "spelling",
    [
        "garden-table",
        "garden\u2011table",
        "garden\u2212table",
        "garden-table.",
        "the garden table",
        "garden-tables",
        "the garden tables",
        "table (garden)",
        "garden-table (SU-87310)",
        "garden-table #1",
        "garden/table",
        "gardentable",
        "Garden Table, order W2611340",
    ],
)
def test_one_item_key_for_every_way_of_naming_it(spelling: str) -> None:
    from core.identity import normalize_item

    assert normalize_item(spelling) == normalize_item("garden-table") == "gardentable"


def test_item_keys_keep_different_things_apart() -> None:
    from core.identity import normalize_item

    assert normalize_item("scratched leg") != normalize_item("garden-table")
    assert normalize_item("item-12") != normalize_item("item-0")
    assert normalize_item("a") == "a" and normalize_item("b") == "b"  # an item that is only an article
    assert normalize_item("boxes") == normalize_item("box") and normalize_item("batteries") == "battery"
    assert normalize_item("") == ""  # no item: the whole order
    # An item that is only a reference names that record (two bills, two lines, two orders stay apart).
    assert normalize_item("B1002") != normalize_item("L1001") != normalize_item("#W4923227") != ""
    assert normalize_item("garden-table (SU-87310)") == normalize_item("garden-table")


@pytest.mark.parametrize(
    ("tool", "effect"),
    [
        ("issueRefund", "refund"),
        ("stripe.refund", "refund"),
        ("refunds.create", "refund"),
        ("issue_store_credit", "credit"),
        ("chargeCard", "charge"),
        ("lookup_order", None),
        ("refundable_check", None),
    ],
)
def test_a_tool_outside_the_catalog_is_money_when_its_name_says_so(tool: str, effect: str | None) -> None:
    tools = ToolCatalog.build(irreversible=[], money={})
    assert tools.money_effect(tool) == effect
    assert tools.is_unclassified_money(tool) is (effect is not None)
    assert tools.is_irreversible(tool) is (effect is not None)


def test_a_reason_needs_words() -> None:
    from core.identity import has_words

    assert not any(has_words(r) for r in [".", "\u200b", " ", "-", "!!", "1", "\u200b.\u200b"])
    assert has_words("the buyer was charged twice") and has_words("ok")
