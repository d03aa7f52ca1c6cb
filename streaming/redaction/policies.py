"""What a stream redacts: its policies, and placeholders or masks.

A stream's policies are the server's (`--redact`) and the ones it asks for: it may add
to the server's, never remove one (a compliance default must hold for every stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from streaming.errors import InvalidFieldError


class Policy(StrEnum):
    """A kind of text that is redacted, and the placeholder that replaces it."""

    PCI = "pci"  # card numbers (Luhn-valid), with expiry dates and security codes
    SSN = "ssn"  # US social security numbers
    NUMBERS = "numbers"  # any run of 4 or more digits
    PHONE = "phone"  # telephone numbers
    EMAIL = "email"  # e-mail addresses, written or spoken

    @property
    def placeholder(self) -> str:
        return f"[{self.value.upper()}]"


#: Where two policies claim the same text, the earlier names it.
PRIORITY = (Policy.PCI, Policy.SSN, Policy.PHONE, Policy.EMAIL, Policy.NUMBERS)


@dataclass(frozen=True, slots=True)
class Redaction:
    """A stream's policies; `mask` replaces each character instead of the whole span."""

    policies: frozenset[Policy] = frozenset()
    mask: bool = False

    def __bool__(self) -> bool:
        return bool(self.policies)

    def adding(self, other: Redaction) -> Redaction:
        """These policies and `other`'s: a stream adds to the server's, never removes."""
        return Redaction(self.policies | other.policies, self.mask or other.mask)


def parse_policies(given: object, field: str = "redact") -> frozenset[Policy]:
    """`"pci,ssn"` or `["pci", "ssn"]` as policies; raises InvalidFieldError naming
    `field` when it is neither, or an unknown policy."""
    if isinstance(given, str):
        names = given.split(",")
    elif isinstance(given, list) and all(isinstance(n, str) for n in given):
        names = given
    else:
        raise InvalidFieldError(f'{field} must be a list of policies, e.g. ["pci", "email"]')
    wanted = [n.strip().lower() for n in names if n.strip()]
    known = {p.value for p in Policy}
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise InvalidFieldError(
            f"unknown redaction policy {', '.join(unknown)}: known are "
            + ", ".join(p.value for p in Policy)
        )
    return frozenset(Policy(n) for n in wanted)
