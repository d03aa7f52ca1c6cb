"""Policies: parsed strictly, and a stream adds to the server's, never removes."""

from __future__ import annotations

import pytest

from streaming.errors import InvalidFieldError
from streaming.redaction.policies import Policy, Redaction, parse_policies


def test_policies_parse_and_a_stream_only_adds() -> None:
    assert parse_policies("pci, SSN") == {Policy.PCI, Policy.SSN}
    assert parse_policies(["email"]) == {Policy.EMAIL}
    with pytest.raises(InvalidFieldError, match="unknown redaction policy cards"):
        parse_policies("pci,cards")
    server = Redaction(frozenset({Policy.PCI}))
    stream = Redaction(frozenset({Policy.EMAIL}), mask=True)
    assert server.adding(stream) == Redaction(frozenset({Policy.PCI, Policy.EMAIL}), mask=True)
    assert server.adding(Redaction()) == server
