"""The issuer's signing keys, from its JWKS (RFC 7517), cached by the Verifier."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from jwt import PyJWK
from jwt.exceptions import PyJWKError

from lbauth.verify.claims import ALLOWED_ALGS
from lbauth.verify.discovery import fetch_json

log = logging.getLogger("lbauth.verify")

Keys = dict[str, tuple[str, Any]]  # kid -> (alg, public key object), as decode_access_token takes them


def parse_jwks(document: dict[str, Any]) -> Keys:
    """The signature keys of a JWKS with an allowed `alg` and a `kid`; others are skipped."""
    keys: Keys = {}
    for jwk in document.get("keys", []):
        if jwk.get("alg") not in ALLOWED_ALGS or jwk.get("use", "sig") != "sig" or "kid" not in jwk:
            continue
        try:
            keys[jwk["kid"]] = (jwk["alg"], PyJWK(jwk, algorithm=jwk["alg"]).key)
        except PyJWKError as exc:
            log.warning("ignoring JWKS key %s: %s", jwk.get("kid"), exc)
    return keys


class KeyCache:
    """The keys last fetched, due again after `max_age` seconds, or after `unknown_kid_interval`
    seconds once a token names a kid they lack (a key published since: contract 9, key rotation)."""

    def __init__(self, max_age: float, unknown_kid_interval: float) -> None:
        self.max_age, self.unknown_kid_interval = max_age, unknown_kid_interval
        self.keys: Keys = {}
        self.fetches = 0
        self.fetched_at = 0.0  # time.monotonic() of the last fetch
        self.unknown_kid = threading.Event()  # set by note_kid; the Verifier's refresher waits on it

    def note_kid(self, kid: str | None) -> None:
        """A refused token named `kid`: if it is not one of ours, ask for the JWKS again."""
        if kid is not None and kid not in self.keys:
            self.unknown_kid.set()

    def seconds_until_refetch(self) -> float:
        """How long an unknown kid must wait before it may fetch the keys again (<= 0: now)."""
        return self.unknown_kid_interval - (time.monotonic() - self.fetched_at)

    def due(self, force: bool = False) -> bool:
        stale = time.monotonic() - self.fetched_at >= self.max_age
        wanted = self.unknown_kid.is_set() and self.seconds_until_refetch() <= 0
        return force or stale or wanted or not self.keys

    def fetch(self, jwks_uri: str, timeout: float) -> None:
        self.unknown_kid.clear()
        document = fetch_json(jwks_uri, timeout)
        self.fetches += 1
        self.keys = parse_jwks(document)
        self.fetched_at = time.monotonic()
