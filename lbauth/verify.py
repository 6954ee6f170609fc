"""Offline verification of lbauth access tokens, for resource services (contract sections 6 and 9).

An access token is `lba_at_` + a compact JWS in the RFC 9068 profile. This module imports only the
standard library, PyJWT and cryptography. The server checks its own tokens with the same
`decode_access_token` and the same `CheckList`.

    verifier = Verifier("https://auth.example.com", audience="https://auth.example.com")
    verifier.start()                       # fetch keys and revocations now, then in the background
    claims = verifier.verify(token, required_scopes=["userinfo"])   # no I/O; raises TokenError
    verifier.close()

Tornado handlers: decorate a method with `@requires_token(verifier, "scope", ...)`; the claims
are then `self.token_claims`, and a refused request gets the lbauth error envelope and the
RFC 6750 `WWW-Authenticate` header.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jwt import PyJWK
from jwt.algorithms import get_default_algorithms
from jwt.exceptions import PyJWKError

log = logging.getLogger("lbauth.verify")

PREFIX = "lba_at_"
ALLOWED_ALGS = frozenset({"ES256", "RS256", "EdDSA"})  # never "none", never HMAC (RFC 8725 3.1)
TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 2.1
REQUIRED_CLAIMS = ("iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti")
MAX_LEEWAY = 60
_ALGORITHMS = {name: alg for name, alg in get_default_algorithms().items() if name in ALLOWED_ALGS}


class TokenError(Exception):
    """Why a token is refused: `sub_code` and `status` as in the contract's section 3."""

    def __init__(self, sub_code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.sub_code = sub_code
        self.status = status
        self.message = message

    @property
    def challenge(self) -> str:
        """The RFC 6750 WWW-Authenticate value for this refusal."""
        if self.sub_code == "oauth2.token.missing":
            return "Bearer"
        if self.sub_code == "oauth2.scope.insufficient":
            return 'Bearer error="insufficient_scope"'
        return 'Bearer error="invalid_token"'


def _invalid(message: str = "The access token is invalid.") -> TokenError:
    return TokenError("oauth2.token.invalid", 401, message)


def _segment(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        raise _invalid() from None


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise _invalid() from None
    if not isinstance(value, dict):
        raise _invalid()
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def decode_access_token(token: str, keys: Mapping[str, tuple[str, Any]], *, issuer: str, audience: str,
                        now: float, leeway: int = 30) -> dict[str, Any]:
    """The verified claims of `token`, or TokenError. `keys` maps kid -> (alg, public key object);
    the header's `kid` picks the key and must agree with its `alg`. The signature is checked
    before any claim is trusted."""
    if not isinstance(token, str) or not token.startswith(PREFIX):
        raise _invalid()
    jws = token[len(PREFIX):]  # stripped exactly once: "lba_at_lba_at_..." stays invalid
    parts = jws.split(".")
    if len(parts) != 3:
        raise _invalid()
    header = _json_object(_segment(parts[0]))
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALLOWED_ALGS or not isinstance(kid, str) or kid not in keys:
        raise _invalid()
    key_alg, key = keys[kid]
    if key_alg != alg or str(header.get("typ", "")).lower() not in TOKEN_TYPES or "crit" in header:
        raise _invalid()
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", "replace")
    if not _ALGORITHMS[alg].verify(signing_input, key, _segment(parts[2])):
        raise _invalid()
    claims = _json_object(_segment(parts[1]))
    if any(name not in claims for name in REQUIRED_CLAIMS):
        raise _invalid()
    aud = claims["aud"]
    if claims["iss"] != issuer or not (aud == audience or (isinstance(aud, list) and audience in aud)):
        raise _invalid()
    exp, iat = claims["exp"], claims["iat"]
    if not _number(exp) or not _number(iat) or not all(isinstance(claims[c], str) for c in
                                                        ("sub", "client_id", "scope", "jti")):
        raise _invalid()
    check_times(claims, now, leeway)
    return claims


def check_times(claims: Mapping[str, Any], now: float, leeway: float = 0) -> None:
    """TokenError unless `now` lies between the token's `iat` and `exp` (RFC 7519 4.1.4, 4.1.6),
    give or take `leeway` seconds (at most MAX_LEEWAY)."""
    leeway = min(max(leeway, 0), MAX_LEEWAY)
    if claims["iat"] > now + leeway:
        raise _invalid("The access token was issued in the future.")
    if claims["exp"] <= now - leeway:
        raise TokenError("oauth2.token.expired", 401, "The access token has expired.")


def require_scopes(claims: Mapping[str, Any], required: Iterable[str]) -> None:
    """TokenError `oauth2.scope.insufficient` (403) unless every required scope was granted."""
    if isinstance(required, str):  # one scope, not its letters
        required = [required]
    granted = set(claims.get("scope", "").split())
    if not set(required) <= granted:
        raise TokenError("oauth2.scope.insufficient", 403,
                         "The access token does not carry the scope this resource needs.")


# ---- the revocation check-list (contract section 7) -------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    cursor: int
    grant_id: str | None
    jti: str | None
    revoked_at: int
    expires_at: int


class CheckList:
    """Grant ids and access-token ids whose tokens must be refused although their signatures are
    good. A grant entry refuses that grant's tokens issued at or before its `revoked_at`; a jti
    entry, that one token. Checking costs two dict look-ups, whatever the list's size."""

    def __init__(self) -> None:
        self._grants: dict[str, tuple[int, int]] = {}  # grant id -> (revoked_at, expires_at)
        self._jtis: dict[str, int] = {}  # jti -> expires_at
        self.cursor: int | str = 0  # the server's feed position (an id there, an opaque string here)

    def __len__(self) -> int:
        return len(self._grants) + len(self._jtis)

    def is_revoked(self, grant_id: str | None, jti: str | None, issued_at: float) -> bool:
        if jti is not None and jti in self._jtis:
            return True
        entry = self._grants.get(grant_id) if grant_id is not None else None
        return entry is not None and issued_at <= entry[0]

    def grant_revoked_at(self, grant_id: str) -> int | None:
        entry = self._grants.get(grant_id)
        return entry[0] if entry else None

    def add(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if entry.grant_id:
                revoked_at, expires_at = self._grants.get(entry.grant_id, (0, 0))
                self._grants[entry.grant_id] = (max(revoked_at, entry.revoked_at), max(expires_at, entry.expires_at))
            if entry.jti:
                self._jtis[entry.jti] = max(entry.expires_at, self._jtis.get(entry.jti, 0))
            if isinstance(self.cursor, int):
                self.cursor = max(self.cursor, entry.cursor)

    def prune(self, now: float) -> int:
        """Drop entries whose tokens have all expired; returns how many."""
        before = len(self)
        self._grants = {k: v for k, v in self._grants.items() if v[1] > now}
        self._jtis = {k: v for k, v in self._jtis.items() if v > now}
        return before - len(self)


# ---- the verifier for resource services (contract section 9) ----------------------------------------------

def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


class Verifier:
    """Verifies lbauth access tokens without calling the server for each one.

    It finds the JWKS and the revocation feed through the issuer's RFC 8414 metadata, caches both,
    and refreshes them: the feed every `poll_seconds`, the keys every `jwks_seconds` and soon after
    a token names an unknown `kid` (at most once per `unknown_kid_seconds`).

    `max_staleness` (seconds, by `clock`) makes it fail closed: once the revocation feed has not
    been read for that long (the server unreachable), every token is refused with 503
    `server.unavailable` rather than verified against a list that may miss revocations
    (RFC 9700 §4.14 in spirit). None, the default, keeps verifying with the last list.
    """

    def __init__(self, issuer: str, audience: str, *, leeway: int = 30, poll_seconds: float = 2.0,
                 jwks_seconds: float = 300.0, unknown_kid_seconds: float = 10.0, timeout: float = 5.0,
                 max_staleness: float | None = None, clock: Callable[[], float] = time.time) -> None:
        if not 0 <= leeway <= MAX_LEEWAY:
            raise ValueError(f"leeway must be between 0 and {MAX_LEEWAY} seconds")
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self.leeway = leeway
        self.poll_seconds, self.jwks_seconds = poll_seconds, jwks_seconds
        self.unknown_kid_seconds, self.timeout = unknown_kid_seconds, timeout
        self.max_staleness = max_staleness
        self.refreshed_at: float | None = None  # by `clock`: when the revocation list was last read
        self.clock = clock
        self.keys: dict[str, tuple[str, Any]] = {}
        self.checklist = CheckList()
        self._jwks_uri: str | None = None
        self._feed_uri: str | None = None
        self._jwks_at = 0.0  # when the keys were last fetched (monotonic)
        self.jwks_fetches = 0
        self._unknown_kid = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one refresh at a time

    # -- verification: memory only ---------------------------------------------------------------------

    def verify(self, token: str, required_scopes: Iterable[str] = ()) -> dict[str, Any]:
        """The claims of a valid, unrevoked token carrying `required_scopes`; else TokenError."""
        if not self.keys:
            raise TokenError("server.unavailable", 503, "The verifier has no keys yet; call refresh() or start().")
        if self.max_staleness is not None and self.clock() - (self.refreshed_at or 0) > self.max_staleness:
            raise TokenError("server.unavailable", 503, "The revocation list is stale: the server is unreachable.")
        try:
            claims = decode_access_token(token, self.keys, issuer=self.issuer, audience=self.audience,
                                         now=self.clock(), leeway=self.leeway)
        except TokenError:
            self._note_unknown_kid(token)
            raise
        if self.checklist.is_revoked(claims.get("gid"), claims["jti"], claims["iat"]):
            raise TokenError("oauth2.token.revoked", 401, "The access token has been revoked.")
        if required_scopes:
            require_scopes(claims, required_scopes)
        return claims

    def _note_unknown_kid(self, token: Any) -> None:
        """A kid we do not know may be a key published since the last fetch: ask for the JWKS
        again (the refresher does it; verify itself never does I/O)."""
        try:
            header = json.loads(_segment(token[len(PREFIX):].split(".", 1)[0]))
            kid = header.get("kid") if isinstance(header, dict) else None
        except (TokenError, ValueError, TypeError, AttributeError):
            return
        if isinstance(kid, str) and kid not in self.keys:
            self._unknown_kid.set()

    # -- refreshing: network ----------------------------------------------------------------------------

    def _get(self, url: str) -> tuple[dict[str, Any], dict[str, str]]:
        if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
            raise ValueError(f"refusing to fetch a non-HTTP URL: {url[:100]}")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - checked above
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            return json.loads(response.read()), dict(response.headers)

    def refresh(self, *, force_keys: bool = False) -> None:
        """Fetch what is due: the metadata once, the keys when stale (or forced), the feed always."""
        with self._lock:
            if self._jwks_uri is None:
                meta, _ = self._get(f"{self.issuer}/.well-known/oauth-authorization-server")
                if meta.get("issuer", "").rstrip("/") != self.issuer:
                    raise ValueError("the metadata names another issuer (RFC 8414 3.3)")
                self._jwks_uri, self._feed_uri = meta["jwks_uri"], meta.get("revocation_feed_endpoint")
            stale = time.monotonic() - self._jwks_at >= self.jwks_seconds
            wanted = self._unknown_kid.is_set() and time.monotonic() - self._jwks_at >= self.unknown_kid_seconds
            if force_keys or stale or wanted or not self.keys:
                self._unknown_kid.clear()
                self.keys = self._fetch_keys()
                self._jwks_at = time.monotonic()
            if self._feed_uri:
                self._poll_feed()
            self.checklist.prune(self.clock())
            self.refreshed_at = self.clock()

    def _fetch_keys(self) -> dict[str, tuple[str, Any]]:
        document, _ = self._get(self._jwks_uri)
        self.jwks_fetches += 1
        keys = {}
        for jwk in document.get("keys", []):
            if jwk.get("alg") not in ALLOWED_ALGS or jwk.get("use", "sig") != "sig" or "kid" not in jwk:
                continue
            try:
                keys[jwk["kid"]] = (jwk["alg"], PyJWK(jwk, algorithm=jwk["alg"]).key)
            except PyJWKError as exc:
                log.warning("ignoring JWKS key %s: %s", jwk.get("kid"), exc)
        return keys

    def _poll_feed(self) -> None:
        while True:
            url = self._feed_uri
            if self.checklist.cursor:
                url += "?" + urllib.parse.urlencode({"since": self.checklist.cursor})
            document, _ = self._get(url)
            data = document.get("data", document)
            entries = [Entry(0, item.get("grantId"), item.get("jti"), _epoch(item["revokedAt"]),
                             _epoch(item["expiresAt"])) for item in data.get("items", [])]
            self.checklist.add(entries)
            self.checklist.cursor = data.get("cursor") or self.checklist.cursor
            if not entries or data.get("pollAfter", 1) > 0:
                return

    async def arefresh(self, *, force_keys: bool = False) -> None:
        """`refresh()` from asyncio code, without blocking the event loop."""
        await asyncio.to_thread(self.refresh, force_keys=force_keys)

    def start(self) -> None:
        """Refresh now (raising if the server cannot be reached), then keep refreshing in a
        background thread until close()."""
        self.refresh()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lbauth-verifier", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._unknown_kid.wait(self.poll_seconds)
            if self._stop.is_set():
                return
            if woken:  # an unknown kid: fetch keys, but not more often than allowed
                wait = self.unknown_kid_seconds - (time.monotonic() - self._jwks_at)
                if wait > 0 and self._stop.wait(min(wait, self.poll_seconds)):
                    return
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the cached keys and list stay; next tick retries
                log.warning("lbauth verifier refresh failed: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        self._stop.set()
        self._unknown_kid.set()  # wake the thread
        if self._thread:
            self._thread.join(timeout=self.timeout + 1)
            self._thread = None


# ---- Tornado (duck-typed: this module does not import Tornado) -------------------------------------------

def requires_token(verifier: Verifier, *scopes: str) -> Callable:
    """Protect a Tornado RequestHandler method: `@requires_token(verifier, "chat.read")`."""
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(handler: Any, *args: Any, **kwargs: Any) -> Any:
            header = handler.request.headers.get("Authorization", "")
            scheme, _, token = header.strip().partition(" ")
            try:
                if not header:
                    raise TokenError("oauth2.token.missing", 401, "An access token is required.")
                if scheme.lower() != "bearer" or not token.strip():
                    raise _invalid()
                handler.token_claims = verifier.verify(token.strip(), scopes)
            except TokenError as exc:
                handler.set_status(exc.status)
                if exc.status in (401, 403):
                    handler.set_header("WWW-Authenticate", exc.challenge)
                elif exc.status == 503:
                    handler.set_header("Retry-After", "5")
                handler.finish({"code": exc.status, "message": exc.message, "subCode": exc.sub_code})
                return None
            return method(handler, *args, **kwargs)
        return wrapper
    return decorate
