"""Authentication context classes (OpenID Connect Core 2 `acr`, OpenID EAP ACR values 1.0): what
a sign-in's methods (RFC 8176 `amr`) amount to, strongest first."""

from __future__ import annotations

from typing import Final

PHISHING_RESISTANT: Final = "phr"  # OpenID EAP ACR values 1.0: a passkey
MULTI_FACTOR: Final = "urn:lbauth:acr:mfa"  # a password and a second step that is not a passkey
PASSWORD_ONLY: Final = "urn:lbauth:acr:pwd"  # noqa: S105 - a class name: a password alone
SUPPORTED: Final = (PHISHING_RESISTANT, MULTI_FACTOR, PASSWORD_ONLY)  # `acr_values_supported`, strongest first

_KEYS: Final = frozenset({"hwk", "swk"})  # RFC 8176 2: a hardware- or software-secured key


def acr_of(amr: tuple[str, ...] | list[str]) -> str:
    """The class a sign-in with these methods reached: `phr` when a passkey took part, the
    multi-factor class after any other second step, the password class otherwise."""
    methods = set(amr)
    if methods & _KEYS:
        return PHISHING_RESISTANT
    if "mfa" in methods:
        return MULTI_FACTOR
    return PASSWORD_ONLY
