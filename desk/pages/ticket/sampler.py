"""The database's sample of a long ticket's chart: the same points `sample_indices` picks, read by
window functions in one query instead of reading every turn.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from desk.pages.ticket.series import SERIES_FIELDS, SeriesRow, _must_keep
from tickets.models import Ticket, Turn


def _turn_columns() -> dict[str, str]:
    """The turn table's name and the columns the sample reads, quoted for this database."""
    quote = connection.ops.quote_name
    columns = {f.name: str(f.column) for f in Turn._meta.concrete_fields}
    names = ("ticket", *SERIES_FIELDS)
    return {name: quote(columns[name]) for name in names} | {"table": quote(Turn._meta.db_table)}


def sampled_series_rows(
    ticket: Ticket, *, keep_turns: Iterable[int], limit: int, first: int = 1
) -> list[SeriesRow] | None:
    """The chart's rows of the turns `first` to the ticket's last, more than `limit` of them, sampled by
    the database exactly as `sample_indices` samples them (turn n is index n - first: a ticket's turns are
    numbered 1 to its turn count), so `limit` rows come back instead of every turn. One query; a second only
    when the threshold or budget in force changed along those turns (they are kept too, which leaves fewer
    buckets). None when some turn was stored without its figures: those are replayed from every turn.
    """
    count = ticket.turn_count - first + 1
    keep = [n - first for n in keep_turns]
    must = _must_keep(count, keep, limit)
    rows = _sample_query(ticket, first=first, count=count, must=must, buckets=limit - len(must))
    if any(row[2] == 0 for row in rows):  # token_budget
        return None
    changed = [row[0] - first for row in rows if row[-1]]
    if changed:
        exact = _must_keep(count, [*keep, *changed], limit)
        if exact != must:
            must = exact
            rows = _sample_query(ticket, first=first, count=count, must=must, buckets=limit - len(must))
    kept = {i + first for i in must}
    return [row[:5] for row in rows if row[5] == 1 or row[0] in kept]  # type: ignore[misc]


def _sample_query(
    ticket: Ticket, *, first: int, count: int, must: list[int], buckets: int
) -> list[tuple[int, ...]]:
    """Rows of `SERIES_FIELDS` + (rank in its bucket by context size, changed) of the turns from `first`:
    each bucket's first highest turn, the turns at indices `must`, and every turn where the figures in force
    changed or are missing."""
    c = _turn_columns()
    columns = ", ".join(c[name] for name in SERIES_FIELDS)
    number, budget, threshold = c["number"], c["token_budget"], c["threshold_tokens"]
    wanted = ", ".join(["%s"] * len(must))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, peak, changed FROM (SELECT {columns}, "
            f"ROW_NUMBER() OVER (PARTITION BY ({number} - %s) * %s / %s "
            f"ORDER BY {c['context_tokens']} DESC, {number}) AS peak, "
            f"CASE WHEN {budget} = 0 OR {budget} <> LAG({budget}) OVER (ORDER BY {number}) "
            f"OR {threshold} <> LAG({threshold}) OVER (ORDER BY {number}) THEN 1 ELSE 0 END AS changed "
            f"FROM {c['table']} WHERE {c['ticket']} = %s AND {number} >= %s) AS ranked "
            f"WHERE peak = 1 OR changed = 1 OR {number} IN ({wanted}) ORDER BY {number}",
            [first, buckets, count, ticket.pk, first, *(i + first for i in must)],
        )
        return [tuple(row) for row in cursor.fetchall()]
