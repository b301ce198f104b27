"""Pure code of the desk: plain functions and values over plain data.

Nothing here imports Django or the project's apps (tests/test_layers.py enforces it), so everything here is
testable without a database and every app may import it.
"""
