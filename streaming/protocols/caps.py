"""Caps on the lists one client message may carry, checked by length before any item is
read or any object is built from them: within a frame's size limit a list can still hold
tens of thousands of items, and building (then refusing) them all costs the event loop
that every stream of the worker shares."""

from __future__ import annotations

from streaming.errors import InvalidFieldError
from streaming.redaction.policies import Policy, parse_policies

#: Redaction policies a list may name: each of the five a few times over is plenty.
MAX_REDACT_ITEMS = 32


def check_count(count: int, limit: int, what: str) -> None:
    """InvalidFieldError when a client sent more than `limit` of `what`."""
    if count > limit:
        raise InvalidFieldError(f"at most {limit} {what}; got {count}")


def redact_policies(given: object, field: str) -> frozenset[Policy]:
    """`parse_policies` for a client's list (`["pci"]` or `"pci,ssn"`), its length first."""
    if isinstance(given, str):
        check_count(given.count(",") + 1, MAX_REDACT_ITEMS, f"{field} entries")
    elif isinstance(given, list):
        check_count(len(given), MAX_REDACT_ITEMS, f"{field} entries")
    return parse_policies(given, field)
