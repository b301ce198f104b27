"""The coverage check: does the summary carry every action, constraint, open question and decision of the
pinned state?

Pure functions over plain data, no model. Matching is tolerant of wording and strict about substance:

- Money is read with its unit ($40, 40 dollars, 4000 cents, USD 40.00, 40,00 EUR, forty dollars) and
  compared in cents; when an action has an amount, the entry must state it, and a different amount is a miss.
- An action is found through its tool's verb family (issue_refund ~ refunded / refund issued / credited
  back; cancel_* ~ cancelled; book_return ~ returned / return booked; exchange_* ~ exchanged / swapped) and
  its item's words. "The table" is accepted for `garden-table` (the item's head noun) because the verb and
  the amount must match too; "refunded $40" with no item at all is a miss.
- Negation and modality are scoped to the clause (split at ; . , parentheses and but/because/...): "the
  refund was not issued", "a refund was proposed", "will refund", "customer asked for a refund" do not
  cover a refund that was issued.
- A constraint, question or decision is found by its content words, each with its polarity in its clause:
  "no refund wanted, replacement ok" does not cover "no replacement wanted"; "refund denied" does not
  cover "approved a refund". An open question must still read as open ("photo received" is a miss), and a
  decision must read as made ("refund proposed" is a miss).
- An entry that names a pinned item by its id as a whole word (`A1`, `C2`, `Q1`, `D3`) stands for it,
  with the same checks on what the entry says about it.

docs/coverage.md says what this cannot do and how well it does on the labelled benchmark.

Callers import from here (`from core.coverage import check_coverage`): words, money and clauses read the
text, matching compares one item with one field's entries, report runs the whole check. Pure: no Django.
"""

from core.coverage.matching import (
    Match,
    action_covered,
    action_match,
    id_references,
    text_covered,
    text_match,
)
from core.coverage.report import CoverageReport, action_label, check_coverage
from core.coverage.words import normalize_name

__all__ = [
    "CoverageReport",
    "Match",
    "action_covered",
    "action_label",
    "action_match",
    "check_coverage",
    "id_references",
    "normalize_name",
    "text_covered",
    "text_match",
]
