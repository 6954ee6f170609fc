"""Authentication context classes (OpenID Connect Core 2 `acr`, OpenID EAP ACR values 1.0): what
a sign-in's methods (RFC 8176 `amr`) amount to, strongest first."""

from __future__ import annotations

from typing import Final

PHISHING_RESISTANT: Final = "phr"  # OpenID EAP ACR values 1.0: a passkey
MULTI_FACTOR: Final = "urn:lbauth:acr:mfa"  # a password and a second step that is not a passkey
PASSWORD_ONLY: Final = "urn:lbauth:acr:pwd"  # noqa: S105 - a class name: a password alone
SUPPORTED: Final = (PHISHING_RESISTANT, MULTI_FACTOR, PASSWORD_ONLY)  # `acr_values_supported`, strongest first

_KEYS: Final = frozenset({"hwk", "swk"})  # RFC 8176 2: a hardware- or software-secured key


_RANK: Final = {value: len(SUPPORTED) - i for i, value in enumerate(SUPPORTED)}


def requested(raw: str | None) -> tuple[str, ...]:
    """The `acr_values` of an authorization request (OpenID Connect Core 3.1.2.1: space-separated,
    in order of preference) that lbauth knows; others are ignored, as the parameter is voluntary."""
    return tuple(value for value in (raw or "").split() if value in _RANK)


def meets(reached: str, wanted: str) -> bool:
    """Does a sign-in that reached class `reached` satisfy a request for `wanted`? A stronger class
    satisfies a weaker one (a passkey sign-in meets a request for a second step)."""
    return _RANK.get(reached, 0) >= _RANK[wanted]


def acr_of(amr: tuple[str, ...] | list[str]) -> str:
    """The class a sign-in with these methods reached: `phr` when a passkey took part, the
    multi-factor class after any other second step, the password class otherwise."""
    methods = set(amr)
    if methods & _KEYS:
        return PHISHING_RESISTANT
    if "mfa" in methods:
        return MULTI_FACTOR
    return PASSWORD_ONLY
