"""The coverage check: does the summary carry every action, constraint, open question and decision of the
pinned state? Callers import from here (`from core.coverage import check_coverage`); the modules under it
are the check's parts. Pure: no Django.
"""

from core.coverage.matching import (
    CoverageReport,
    Match,
    action_covered,
    action_label,
    action_match,
    check_coverage,
    id_references,
    normalize_name,
    text_covered,
    text_match,
)

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
