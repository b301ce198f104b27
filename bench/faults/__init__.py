"""`manage.py load_faults`: agents under injected faults (workers killed, the master restarted, a summarizer that
hangs), counted for lost and doubled writes. Tooling: nothing in the desk imports it."""
