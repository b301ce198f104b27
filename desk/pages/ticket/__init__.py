"""The ticket page's reads, by part: the page itself (`page`), the context chart (`series`) and the
database's sample of a long one (`sampler`), the state and status trails (`trails`), and the JSON
export (`export`). The names below are the ones the views, the charts and the tests use.
"""

from desk.pages.ticket.export import EXPORT_FORMAT, export_chunks, ticket_export
from desk.pages.ticket.page import (
    COMPACTIONS_SHOWN,
    REFUSED_SHOWN,
    TIMELINE_WINDOW,
    WORTH_A_LOOK,
    TicketPage,
    TimelineTurn,
    TimelineWindow,
    get_ticket,
    refused_turn,
    ticket_page,
    timeline_window,
)
from desk.pages.ticket.sampler import sampled_series_rows
from desk.pages.ticket.series import (
    CHART_MAX_POINTS,
    PAGE_EVENT_FIELDS,
    SERIES_FIELDS,
    ContextPoint,
    ContextSeries,
    EventFigures,
    SeriesRow,
    context_series,
    event_figures,
    sample_indices,
)
from desk.pages.ticket.trails import (
    AUDIT_WINDOW,
    STATUS_WINDOW,
    AuditRow,
    StatePanel,
    audit_rows,
    audit_trail,
    changes_since,
    state_panel,
    status_trail,
)

__all__ = [
    "AUDIT_WINDOW",
    "CHART_MAX_POINTS",
    "COMPACTIONS_SHOWN",
    "EXPORT_FORMAT",
    "PAGE_EVENT_FIELDS",
    "REFUSED_SHOWN",
    "SERIES_FIELDS",
    "STATUS_WINDOW",
    "TIMELINE_WINDOW",
    "WORTH_A_LOOK",
    "AuditRow",
    "ContextPoint",
    "ContextSeries",
    "EventFigures",
    "SeriesRow",
    "StatePanel",
    "TicketPage",
    "TimelineTurn",
    "TimelineWindow",
    "audit_rows",
    "audit_trail",
    "changes_since",
    "context_series",
    "event_figures",
    "export_chunks",
    "get_ticket",
    "refused_turn",
    "sample_indices",
    "sampled_series_rows",
    "state_panel",
    "status_trail",
    "ticket_export",
    "ticket_page",
    "timeline_window",
]
