"""An HTTP Message Signatures (RFC 9421) signer for tests, written from the RFC alone.

It shares no code with the server's verifier (the `http-message-signatures` library), so
a test that signs here and verifies there checks the server against the RFC, not against
itself. Only what Genesys' AudioHook client signs is covered: HMAC-SHA256 over derived
components (`@request-target`, `@authority`, …) and plain header fields, with String and
Integer signature parameters (RFC 9421 §2.3, §2.5; RFC 8941 for the serialization).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence


def sf_string(value: str) -> str:
    """An RFC 8941 String: quoted, with `\\` and `"` escaped."""
    if not all(0x20 <= ord(c) <= 0x7E for c in value):
        raise ValueError(f"not a Structured Field String: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sf_param(value: str | int) -> str:
    return str(value) if isinstance(value, int) else sf_string(value)


def signature_params(components: Sequence[str], params: Mapping[str, str | int]) -> str:
    """The `@signature-params` value: the inner list of components, then `;key=value`s."""
    inner = "(" + " ".join(sf_string(c) for c in components) + ")"
    return inner + "".join(f";{k}={sf_param(v)}" for k, v in params.items())


def signature_base(
    components: Mapping[str, str], params: Mapping[str, str | int]
) -> tuple[str, str]:
    """(the signature base of RFC 9421 §2.5, the `@signature-params` value).

    `components` maps each covered component name, in order, to its value.
    """
    sig_params = signature_params(list(components), params)
    lines = [f"{sf_string(name)}: {value}" for name, value in components.items()]
    lines.append(f'"@signature-params": {sig_params}')
    return "\n".join(lines), sig_params


def sign_hmac_sha256(
    key: bytes,
    components: Mapping[str, str],
    params: Mapping[str, str | int],
    label: str = "sig1",
) -> dict[str, str]:
    """The `Signature-Input` and `Signature` header fields for `components`."""
    base, sig_params = signature_base(components, params)
    digest = hmac.new(key, base.encode("ascii"), hashlib.sha256).digest()
    return {
        "Signature-Input": f"{label}={sig_params}",
        "Signature": f"{label}=:{base64.b64encode(digest).decode()}:",
    }
