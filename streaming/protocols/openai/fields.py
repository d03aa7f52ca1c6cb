"""Typed reads of OpenAI Realtime client JSON, failing with OpenAI's error codes and params."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streaming.errors import InvalidFieldError, StateError

#: The most items an array of strings may hold unless its field says otherwise: checked
#: before any item is read (the keywords' own cap is the hotword limit).
MAX_ITEMS = 256

# OpenAI's `error.code` values for a field that is wrong in each way.
INVALID_VALUE = "invalid_value"
INVALID_TYPE = "invalid_type"
UNKNOWN_PARAMETER = "unknown_parameter"
MISSING_PARAMETER = "missing_required_parameter"


class RealtimeFieldError(InvalidFieldError):
    """A bad field in a client event: OpenAI's code for it and the field's dotted path."""

    def __init__(self, message: str, param: str | None, openai_code: str = INVALID_VALUE) -> None:
        super().__init__(message)
        self.param = param
        self.openai_code = openai_code


class LockedSettingError(StateError):
    """A session update that would change the audio format or turn detection after audio."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param
        self.openai_code = INVALID_VALUE


def join(prefix: str, key: str) -> str:
    """The dotted path OpenAI reports in `error.param`."""
    return f"{prefix}.{key}" if prefix else key


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _wrong(value: object, expected: str, param: str) -> RealtimeFieldError:
    message = f"Invalid type for '{param}': expected {expected}, but got {json_type(value)}."
    return RealtimeFieldError(message, param, INVALID_TYPE)


def obj(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _wrong(value, "an object", param)
    return value


def text(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise _wrong(value, "a string", param)
    return value


def integer(value: object, param: str) -> int:
    # JSON true must not pass as 1; 500.0 from a loose client still means 500.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(value, "an integer", param)
    return value


def number(value: object, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(value, "a number", param)
    return float(value)


def boolean(value: object, param: str) -> bool:
    if not isinstance(value, bool):
        raise _wrong(value, "a boolean", param)
    return value


def strings(value: object, param: str, max_items: int = MAX_ITEMS) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _wrong(value, "an array of strings", param)
    if len(value) > max_items:
        raise RealtimeFieldError(
            f"Invalid '{param}': at most {max_items} items; got {len(value)}.", param
        )
    return tuple(text(item, f"{param}[{i}]") for i, item in enumerate(value))


def choice(value: object, allowed: Iterable[str], param: str) -> str:
    options = tuple(allowed)
    if value not in options:
        supported = ", ".join(f"'{o}'" for o in options)
        raise RealtimeFieldError(
            f"Invalid value: {value!r}. Supported values are: {supported}.", param
        )
    return str(value)


def check_keys(value: Mapping[str, Any], allowed: Iterable[str], prefix: str) -> None:
    """Unknown parameters are refused, as OpenAI does, so a typo is never silently ignored."""
    unknown = set(value).difference(allowed)
    if unknown:
        param = join(prefix, min(unknown))  # the first in order, without sorting them all
        raise RealtimeFieldError(f"Unknown parameter: '{param}'.", param, UNKNOWN_PARAMETER)


def required(value: Mapping[str, Any], key: str, prefix: str) -> Any:
    if key not in value:
        param = join(prefix, key)
        raise RealtimeFieldError(
            f"Missing required parameter: '{param}'.", param, MISSING_PARAMETER
        )
    return value[key]
