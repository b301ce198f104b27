"""Every write to a ticket goes through one function in these modules: atomic, locked, audited.

`lifecycle` opens tickets and moves their status, `turns` appends to the thread, `state_changes`
changes the pinned state (agents and supervisors alike), `actions` records and guards actions,
`classes` changes budgets. None of them calls up into compaction or the interfaces.
"""
