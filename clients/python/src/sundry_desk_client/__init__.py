"""Python client for Sundry Desk: the system of record for the state of long-running LLM support tickets.

`DeskClient` / `AsyncDeskClient` speak the whole agent API; `sundry_desk_client.agents` puts the desk
inside the OpenAI Agents SDK (a Session, and tools guarded against a second irreversible action).
"""

from sundry_desk_client.client import AsyncDeskClient, DeskClient
from sundry_desk_client.errors import (
    BeliefStale,
    CapExceeded,
    Conflict,
    DeskError,
    DeskUnavailable,
    Forbidden,
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PreconditionRequired,
    RateLimited,
    RepeatRefused,
    ServerError,
    StaleVersion,
    TicketExists,
    Unauthorized,
)
from sundry_desk_client.models import (
    Action,
    ActionRecorded,
    Compaction,
    CompactionOutcome,
    Context,
    ContextTurn,
    HistoryEntry,
    HistoryPage,
    PinnedState,
    Summary,
    TextItem,
    Ticket,
    Tokens,
    TurnAnswer,
)

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionRecorded",
    "AsyncDeskClient",
    "BeliefStale",
    "CapExceeded",
    "Compaction",
    "CompactionOutcome",
    "Conflict",
    "Context",
    "ContextTurn",
    "DeskClient",
    "DeskError",
    "DeskUnavailable",
    "Forbidden",
    "HistoryEntry",
    "HistoryPage",
    "IdempotencyConflict",
    "IdempotencyInFlight",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "PinnedState",
    "PreconditionRequired",
    "RateLimited",
    "RepeatRefused",
    "ServerError",
    "StaleVersion",
    "Summary",
    "TextItem",
    "Ticket",
    "TicketExists",
    "Tokens",
    "TurnAnswer",
    "Unauthorized",
]
