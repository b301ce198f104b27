"""Strict serializer fields: the API takes JSON types as they are and refuses what the database cannot store.

DRF's own fields coerce ("5" becomes 5, "yes" becomes True); an agent that sends the wrong type has a bug
it should hear about. Strings must be encodable as UTF-8 without NUL characters, which PostgreSQL refuses.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

MAX_JSON_DEPTH = 32


def storable_text(value: str) -> bool:
    """Text that every supported database stores: UTF-8 encodable (no lone surrogates) and without NUL."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why a JSON value cannot be stored, or None when it can."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested more than {MAX_JSON_DEPTH} levels deep"
    if isinstance(value, str):
        return None if storable_text(value) else "contains a NUL character or an unpaired surrogate"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not storable_text(str(key)):
                return "has a key with a NUL character or an unpaired surrogate"
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
    return None


class StrictCharField(serializers.CharField):
    default_error_messages = {"unstorable": "Must not contain NUL characters or unpaired surrogates."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if not storable_text(data):
            self.fail("unstorable")
        # The schema's maxLength is on what was sent: a value too long before trimming is refused, not trimmed
        # under the limit (DRF checks the length after stripping surrounding whitespace).
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField, StrictCharField):
    pass


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class JSONObjectField(serializers.JSONField):
    """A JSON object (tool arguments), stored as it is."""

    default_error_messages = {"not_object": "Must be a JSON object.", "unstorable": "This object {problem}."}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            self.fail("not_object")
        problem = json_problem(data)
        if problem:
            self.fail("unstorable", problem=problem)
        return data


def _flat(field: serializers.Field) -> bool:
    return not isinstance(
        field, serializers.BaseSerializer | serializers.ListField | serializers.DictField
    ) and (not hasattr(field, "child"))


class StrictSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know, instead of silently dropping them."""

    def get_fields(self) -> dict[str, serializers.Field]:
        """The declared fields, each copied for this serializer to bind. DRF deep-copies every field on every
        request, building each again from its arguments (120 of an action POST's 185 microseconds of
        validation); a field without children holds nothing a request changes, so a shallow copy serves. A
        field with children (a nested serializer, a list or dict of fields) is deep-copied as DRF does."""
        return {
            name: copy.copy(field) if _flat(field) else copy.deepcopy(field)
            for name, field in self._declared_fields.items()
        }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                allowed = ", ".join(self.fields)
                raise serializers.ValidationError(
                    {name: [f"Unknown field. Allowed fields: {allowed}."] for name in unknown}
                )
        return super().to_internal_value(data)
