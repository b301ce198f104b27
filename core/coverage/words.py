"""Words of the coverage check: names normalized as identities are, free text prepared (zero-width
characters gone, contractions spelled out), words cut and stemmed, with the check's synonyms folded in.

Pure: no Django.
"""

from __future__ import annotations

import re
import unicodedata

from core.identity import SEPARATOR as IDENTITY_SEPARATOR
from core.identity import normalize_name as identity_name


def normalize_name(name: str) -> str:
    """A tool or item name as words: the desk's one identity (`tickets.identity`), so the guard and the check
    agree on what "the same item" is, with its separator read as a space."""
    return identity_name(name).replace(IDENTITY_SEPARATOR, " ")


# --- words -------------------------------------------------------------------------------------------

STOPWORDS = {
    "a", "an", "the", "of", "to", "for", "and", "or", "in", "on", "at", "is", "are", "was", "were", "be",
    "been", "it", "its", "that", "this", "these", "those", "with", "by", "from", "as", "i", "my", "me",
    "we", "us", "you", "your", "they", "them", "their", "he", "she", "his", "her", "has", "have", "had",
    "any", "some", "if", "so", "do", "does", "did", "there", "here", "than", "then", "about", "into",
    "onto", "per", "via", "also", "just", "all", "both", "each", "one", "s",
}  # fmt: skip
_IRREGULAR = {
    "sent": "send", "paid": "pay", "held": "hold", "gave": "give", "given": "give", "got": "get",
    "gotten": "get", "kept": "keep", "made": "make", "told": "tell", "wrote": "write", "written": "write",
    "bought": "buy", "sold": "sell", "chose": "choose", "chosen": "choose", "went": "go", "done": "do",
    "did": "do", "was": "be", "were": "be", "been": "be", "is": "be", "are": "be", "has": "have",
    "had": "have", "denied": "deny", "denies": "deny", "modified": "modify", "modifies": "modify",
    "notified": "notify", "replies": "reply", "replied": "reply", "applied": "apply", "pics": "photo",
    "pic": "photo", "refunds": "refund", "items": "item", "goods": "good",
}  # fmt: skip
_SUFFIXES = ("ations", "ation", "ements", "ement", "ments", "ment", "ings", "ing", "ies", "ed", "es", "s")
# Words that mean the same thing to the check (written as words, compared as stems).
_SYNONYM_WORDS = {
    "call": "phone", "called": "phone", "calls": "phone", "telephone": "phone", "rang": "phone",
    "ring": "phone", "picture": "photo", "image": "photo", "photograph": "photo", "pic": "photo",
    "package": "parcel", "shipment": "parcel", "buyer": "customer", "client": "customer",
    "merchant": "seller", "vendor": "seller", "reimbursed": "refund", "reimbursement": "refund",
    "sms": "text", "purchase": "buy", "purchased": "buy", "cancellation": "cancel", "delivery": "deliver",
    "e-mail": "email", "mail": "email",
}  # fmt: skip


def stem(word: str) -> str:
    """A crude stem, good enough to meet "refunded", "refunds" and "refund" (and "tables" and "table")."""
    base = _raw_stem(word)
    return _SYNONYMS.get(base, base)


def _raw_stem(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.isdigit():
        return word
    base = word
    for suffix in _SUFFIXES:
        if base.endswith(suffix) and len(base) - len(suffix) >= 3:
            if suffix == "s" and base.endswith(("ss", "us", "is")):
                break
            base = base[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if base.endswith("e") and len(base) > 3:
        base = base[:-1]
    if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "aeiou":
        base = base[:-1]
    return base


_SYNONYMS = {_raw_stem(k): _raw_stem(v) for k, v in _SYNONYM_WORDS.items()}


# Free text (not names): zero-width characters and the soft hyphen vanish before words are read.
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)


def prepare(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH).casefold()
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    text = re.sub(r"\bwon't\b", "will not", text)
    text = re.sub(r"\bcan'?t\b|\bcannot\b", "can not", text)
    text = re.sub(r"\b(\w+)n't\b", r"\1 not", text)
    return re.sub(r"\b(do|does|did|is|was|were|are|has|have|had|could|would|should|wo)nt\b", r"\1 not", text)


WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of a text, casefolded, with `-` and `_` as separators."""
    return WORD.findall(prepare(text).replace("_", " ").replace("-", " "))
