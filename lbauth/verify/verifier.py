"""The Verifier for resource services (contract section 9): the claim checks, the key cache and
the revocation feed put together, refreshed in a background thread; DPoP proofs (RFC 9449) too."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

from lbauth.verify.checklist import CheckList
from lbauth.verify.claims import (
    MAX_LEEWAY,
    AccessTokenClaims,
    TokenError,
    decode_access_token,
    invalid_token,
    require_authentication,
    require_scopes,
    step_up_requirements,
    unverified_kid,
)
from lbauth.verify.discovery import ServerMetadata, discover
from lbauth.verify.dpop import PROOF_WINDOW, DPoPError, DPoPRefusal, DPoPRequest, ReplayCache, check_proof, token_jkt
from lbauth.verify.feed import poll_feed
from lbauth.verify.keys import KeyCache, Keys

log = logging.getLogger("lbauth.verify")


class Verifier:
    """Verifies lbauth access tokens without calling the server for each one.

    It finds the JWKS and the revocation feed through the issuer's RFC 8414 metadata (at the 3.1
    location, see `metadata_url`; refused unless its `issuer` is `issuer` byte for byte), caches both,
    and refreshes them: the feed every `poll_seconds`, the keys every `jwks_seconds` and soon after
    a token names an unknown `kid` (at most once per `unknown_kid_seconds`).

    `max_staleness` (seconds, by `clock`) makes it fail closed: once the revocation feed has not
    been read for that long (the server unreachable), every token is refused with 503
    `server.unavailable` rather than verified against a list that may miss revocations
    (RFC 9700 §4.14 in spirit). None, the default, keeps verifying with the last list.

    DPoP (RFC 9449): `replay_cache` holds the `jti`s of the proofs it accepted in the last
    PROOF_WINDOW seconds, in this process only.
    """

    def __init__(self, issuer: str, audience: str, *, leeway: int = 30, poll_seconds: float = 2.0,
                 jwks_seconds: float = 300.0, unknown_kid_seconds: float = 10.0, timeout: float = 5.0,
                 max_staleness: float | None = None, clock: Callable[[], float] = time.time) -> None:
        if not 0 <= leeway <= MAX_LEEWAY:
            raise ValueError(f"leeway must be between 0 and {MAX_LEEWAY} seconds")
        self.issuer = issuer  # byte for byte: what the tokens' `iss` and the metadata must say (contract 9)
        self.audience = audience
        self.leeway = leeway
        self.poll_seconds, self.timeout = poll_seconds, timeout
        self.max_staleness = max_staleness
        self.refreshed_at: float | None = None  # by `clock`: when the revocation list was last read
        self.clock = clock
        self.checklist = CheckList()
        self.key_cache = KeyCache(max_age=jwks_seconds, unknown_kid_interval=unknown_kid_seconds)
        self.replay_cache = ReplayCache(PROOF_WINDOW)
        self._metadata: ServerMetadata | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one refresh at a time

    @property
    def keys(self) -> Keys:
        return self.key_cache.keys

    @keys.setter
    def keys(self, keys: Keys) -> None:
        self.key_cache.keys = keys

    @property
    def jwks_fetches(self) -> int:
        return self.key_cache.fetches

    # -- verification: memory only ---------------------------------------------------------------------

    def verify(self, token: str, required_scopes: Iterable[str] = (), *, acr_values: Iterable[str] | str = (),
               max_age: int | None = None, dpop: DPoPRequest | None = None) -> AccessTokenClaims:
        """The claims of a valid, unrevoked token carrying `required_scopes`; else TokenError.

        Step-up (RFC 9470): with `acr_values`, the token's `acr` must be one of them; with `max_age`
        (seconds), its `auth_time` must be at most that old by `clock`. A token that falls short,
        once every other check has passed, is refused with 401
        `oauth2.token.insufficient_user_authentication`, whose `challenge` is the RFC 9470 3 one.
        The claims are an `AccessTokenClaims`: a dict, with `acr`, `amr` and `auth_time` read-only.

        DPoP (RFC 9449 7): `dpop` is the request (method, URL, `DPoP` header) of a token sent with
        `Authorization: DPoP`. It needs a token bound to a key (`cnf.jkt`) and a proof by that key for
        this request and token, not seen before (DPoPError otherwise); every refusal is then a
        DPoPRefusal, whose challenge is in the `DPoP` scheme. Without `dpop`, a bound token is
        refused (RFC 9449 7.2), with a `DPoP` challenge too. The DPoP checks come after the token's
        own (scopes included) and before step-up."""
        if acr_values or max_age is not None:
            acr_values, max_age = step_up_requirements(acr_values, max_age)  # a bad requirement fails every call
        if dpop is None:
            return self._verify(token, required_scopes, acr_values, max_age, None)
        try:
            return self._verify(token, required_scopes, acr_values, max_age, dpop)
        except DPoPRefusal:
            raise
        except TokenError as exc:
            raise DPoPRefusal.of(exc) from None

    def _verify(self, token: str, required_scopes: Iterable[str], acr_values: Iterable[str] | str,
                max_age: int | None, dpop: DPoPRequest | None) -> AccessTokenClaims:
        keys = self.key_cache.keys
        if not keys:
            raise TokenError("server.unavailable", 503, "The verifier has no keys yet; call refresh() or start().")
        if self.max_staleness is not None and self.clock() - (self.refreshed_at or 0) > self.max_staleness:
            raise TokenError("server.unavailable", 503, "The revocation list is stale: the server is unreachable.")
        try:
            claims = decode_access_token(token, keys, issuer=self.issuer, audience=self.audience,
                                         now=self.clock(), leeway=self.leeway)
        except TokenError:
            self.key_cache.note_kid(unverified_kid(token))  # the refresher fetches; verify never does I/O
            raise
        if self.checklist.is_revoked(claims.get("gid"), claims["jti"], claims["iat"]):
            raise TokenError("oauth2.token.revoked", 401, "The access token has been revoked.")
        if required_scopes:
            require_scopes(claims, required_scopes)
        self._check_binding(token, claims, dpop)
        if acr_values or max_age is not None:
            require_authentication(claims, acr_values=acr_values, max_age=max_age, now=self.clock())
        return AccessTokenClaims(claims)

    def _check_binding(self, token: str, claims: dict, dpop: DPoPRequest | None) -> None:
        """RFC 9449 7: a token bound to a key (`cnf.jkt`, 6.1) goes only with a fresh proof by that
        key (4.3, 11.1), and a proof only with a bound token."""
        jkt = token_jkt(claims)
        if dpop is None:
            if jkt is not None:
                raise DPoPRefusal("oauth2.token.invalid", 401, "This access token is bound to a DPoP key: send it "
                                  "with Authorization: DPoP and a DPoP proof.")
            return
        if jkt is None:
            raise invalid_token("This access token is not bound to a DPoP key: send it with Authorization: Bearer.")
        now = self.clock()
        proof = check_proof(dpop.proof, method=dpop.method, url=dpop.url, now=now, access_token=token, jkt=jkt)
        if not self.replay_cache.first_use(proof.jti, proof.iat, now):
            raise DPoPError("Too many DPoP proofs within a minute: try again shortly." if self.replay_cache.full
                            else "The DPoP proof has been used already: make a new one for each request.")

    # -- refreshing: network ----------------------------------------------------------------------------

    def refresh(self, *, force_keys: bool = False) -> None:
        """Fetch what is due: the metadata once, the keys when stale (or forced), the feed always."""
        with self._lock:
            if self._metadata is None:
                self._metadata = discover(self.issuer, self.timeout)
            if self.key_cache.due(force_keys):
                self.key_cache.fetch(self._metadata.jwks_uri, self.timeout)
            if self._metadata.revocation_feed_endpoint:
                poll_feed(self._metadata.revocation_feed_endpoint, self.checklist, self.timeout)
            self.checklist.prune(self.clock())
            self.refreshed_at = self.clock()

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
            woken = self.key_cache.unknown_kid.wait(self.poll_seconds)
            if self._stop.is_set():
                return
            if woken:  # an unknown kid: fetch keys, but not more often than allowed
                wait = self.key_cache.seconds_until_refetch()
                if wait > 0 and self._stop.wait(min(wait, self.poll_seconds)):
                    return
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the cached keys and list stay; next tick retries
                log.warning("lbauth verifier refresh failed: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        self._stop.set()
        self.key_cache.unknown_kid.set()  # wake the thread
        if self._thread:
            self._thread.join(timeout=self.timeout + 1)
            self._thread = None
