"""`make bench`: the desk (D) against a plain Django view (P) and a raw WSGI + psycopg app (R).

Numbers, never assertions: the pure pieces (medians, ratios, the report's keys, wrk's output) are tested.
"""
