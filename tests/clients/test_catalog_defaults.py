from __future__ import annotations

from sundry_desk_client import langchain

from core.identity import DEFAULT_IRREVERSIBLE_TOOLS


def test_the_langchain_middleware_guards_the_desks_default_irreversible_tools() -> None:
    """The client package cannot import the desk, so it carries its own copy of the default catalog; the
    middleware must wrap exactly the tools a default ticket class treats as irreversible."""
    assert langchain.DEFAULT_IRREVERSIBLE_TOOLS == DEFAULT_IRREVERSIBLE_TOOLS
