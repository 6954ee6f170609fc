"""The device authorization grant (RFC 8628), for apps registered for it (their `grant_types`).

A device with no browser, or a poor keyboard, asks `POST /oauth/device_authorization` for a device
code and a user code (3.1, 3.2). Its user opens `{auth_url}/device` on another device, signs in,
types the user code and approves (3.3); meanwhile the device polls the token endpoint with its
device code (3.4, 3.5) and gets its tokens once. Both codes are stored as SHA-256 digests only.

The approval creates or extends the user's grant as a code's approval does
(authorization/codes.py `grant_for`), and the tokens come from the one `Issuer`: revocation,
webhooks and the check-list treat a device's grant as any other.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit, resources, scopes
from lbauth.core.accounts.sessions import SignedIn
from lbauth.core.crypto import opaque
from lbauth.core.fields import require
from lbauth.core.oauth.authorization.codes import Consent, grant_for, retrying_duplicates
from lbauth.core.oauth.authorization.request import requested_scopes
from lbauth.core.oauth.client_auth import ClientCredentials, checked_client
from lbauth.core.oauth.dpop import spend_in
from lbauth.core.oauth.grants import GrantType, refresh_binding, resource_indicators
from lbauth.core.oauth.issuing import Issuance, SignIn
from lbauth.core.oauth.tokens import TokenSet
from lbauth.settings import Settings
from lbauth.storage import Connection
from lbauth.storage.db import CommitThenRaise, Database
from lbauth.storage.records import (
    DEVICE_CODE_GRANT_TYPE,
    App,
    Authentication,
    ClientMetadata,
    DeviceCode,
    ProvenKey,
    Resource,
)
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import device as repo

DEVICE_CODE_TTL = 600  # seconds: RFC 8628 3.2 `expires_in`
POLL_INTERVAL = 5  # seconds: 3.2 `interval`
SLOW_DOWN_STEP = 5  # seconds added to the interval at each slow_down (3.5)
ENDED_KEPT = 3600  # seconds an expired device code is kept, so that a late poll hears expired_token
# RFC 8628 6.1: 8 characters of 20 consonants (34 bits) make no words and survive a case-blind
# typist; with 5 wrong tries a minute per session and per address, guessing one of the codes live
# at once takes years.
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8
VERIFICATION_PATH = "/device"
_TYPED_SEPARATORS = re.compile(r"[\s-]+")


def new_user_code() -> str:
    return "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))


def shown(user_code: str) -> str:
    """As the device and the pages show it: `XXXX-XXXX` (RFC 8628 6.1)."""
    return f"{user_code[:4]}-{user_code[4:]}"


def normalised(typed: str) -> str | None:
    """The user code as typed, in any case, with or without its dash or spaces (RFC 8628 6.1);
    None when it cannot be one."""
    code = _TYPED_SEPARATORS.sub("", typed).upper()
    if len(code) != USER_CODE_LENGTH or any(c not in USER_CODE_ALPHABET for c in code):
        return None
    return code


@dataclass(frozen=True)
class DeviceAuthorization:
    """The device authorization response (RFC 8628 3.2)."""
    device_code: str
    user_code: str  # as shown: XXXX-XXXX
    verification_uri: str
    expires_in: int = DEVICE_CODE_TTL
    interval: int = POLL_INTERVAL

    @property
    def verification_uri_complete(self) -> str:
        """The URI with the user code in it (3.3.1): for a QR code; the user still confirms."""
        return f"{self.verification_uri}?{urlencode({'user_code': self.user_code})}"

    def rfc8628(self) -> dict[str, Any]:
        return {"device_code": self.device_code, "user_code": self.user_code,
                "verification_uri": self.verification_uri,
                "verification_uri_complete": self.verification_uri_complete,
                "expires_in": self.expires_in, "interval": self.interval}


@dataclass(frozen=True)
class DeviceRequest:
    """A pending device request as the user confirms it (RFC 8628 3.3): the app, the user code as
    shown (to compare with the device's), and what the device asked for."""
    app: App
    user_code: str
    scopes: tuple[str, ...]
    resources: tuple[Resource, ...]


def registered_for_device_grant(app: App) -> None:
    """Only an app whose registration holds the device grant may use it (RFC 6749 5.2)."""
    if DEVICE_CODE_GRANT_TYPE not in ClientMetadata.of(app).grant_types:
        raise errors.UnauthorizedClient(f"This client is not registered for the {DEVICE_CODE_GRANT_TYPE} grant.")


class DeviceAuthorizations:
    """The device authorization endpoint and the user's side at {auth_url}/device."""

    def __init__(self, db: Database, clock: Clock, settings: Settings) -> None:
        self.db, self.clock = db, clock
        self.verification_uri = settings.auth_url + VERIFICATION_PATH

    async def start(self, app: App, scope: str | None, resource: Sequence[str]) -> DeviceAuthorization:
        """RFC 8628 3.1, for an authenticated client: `scope` as at /oauth/ (the app's default
        scopes without one), `resource` as RFC 8707 2 has it there."""
        registered_for_device_grant(app)
        asked = requested_scopes(app, scope)
        named: tuple[Resource, ...] = ()
        indicators = resources.parse(resource)
        if indicators:
            asked, named = await resources.resolve(self.db, indicators, asked, scope is not None, app.default_scopes)
        device_code, now = opaque.new_secret(opaque.DEVICE_CODE), int(self.clock.now())

        def insert(conn: Connection) -> str:
            user_code = new_user_code()  # another, if a live request holds this one (Duplicate)
            repo.insert_request(conn, device_code_hash=opaque.digest(device_code),
                                user_code_hash=opaque.digest(user_code), app_id=app.id, scopes=list(asked),
                                resources=[r.uri for r in named], now=now, expires_at=now + DEVICE_CODE_TTL,
                                interval=POLL_INTERVAL)
            return user_code
        user_code = await retrying_duplicates(self.db, insert)
        return DeviceAuthorization(device_code, shown(user_code), self.verification_uri)

    async def pending(self, typed: str) -> DeviceRequest:
        """The pending request whose user code the user typed, or UserCodeInvalid (unknown,
        answered or expired alike)."""
        code = normalised(typed)
        if code is None:
            raise errors.UserCodeInvalid()

        def read(conn: Connection) -> tuple[DeviceCode, App] | None:
            row = repo.pending(conn, opaque.digest(code), int(self.clock.now()))
            app = apps_repo.by_id(conn, row.app_id) if row is not None else None
            return (row, app) if row is not None and app is not None else None
        found = await self.db.read(read)
        if found is None:
            raise errors.UserCodeInvalid()
        row, app = found
        named = await resources.registered(self.db, resources.parse(row.resources))
        return DeviceRequest(app, shown(code), tuple(row.scopes), named)

    async def approve(self, request: DeviceRequest, signed_in: SignedIn,
                      source: audit.Source = audit.NO_SOURCE) -> None:
        """The user's approval (RFC 8628 3.3): the user's grant created or extended to what the
        device asked for, as a code's approval would, and the device's tokens to be issued under
        it, remembering the approving session's sign-in (its `auth_time`, `amr`; contract 19) and,
        for an OpenID request, the app's ID-token algorithm and the session (`sid`)."""
        code_hash, now = _user_code_hash(request), int(self.clock.now())
        session, user = signed_in.session, signed_in.user
        openid = scopes.OPENID in request.scopes
        consent = Consent(request.app.client_id, request.app.name, source)

        def work(conn: Connection) -> None:
            row = repo.pending(conn, code_hash, now)
            if row is None:
                raise errors.UserCodeInvalid()
            grant_id, asu = grant_for(conn, row.app_id, user.id, row.scopes, row.resources, now, consent)
            if not repo.approve(conn, code_hash, now, user_id=user.id, grant_id=grant_id, asu=asu,
                                authentication=Authentication(auth_time=session.authenticated_at, amr=session.amr),
                                session_id=session.id if openid else None,
                                id_token_alg=request.app.id_token_alg if openid else None):
                raise errors.UserCodeInvalid()  # answered meanwhile: the grant's change is rolled back
        await retrying_duplicates(self.db, work)

    async def deny(self, request: DeviceRequest) -> None:
        """The user's denial: the device hears access_denied (RFC 8628 3.5)."""
        if not await self.db.transaction(repo.deny, _user_code_hash(request), int(self.clock.now()),
                                         single_statement=True):
            raise errors.UserCodeInvalid()

    async def forget_ended(self) -> None:
        await self.db.transaction(repo.delete_ended, int(self.clock.now()) - ENDED_KEPT, single_statement=True)


def _user_code_hash(request: DeviceRequest) -> str:
    code = normalised(request.user_code)
    assert code is not None  # a DeviceRequest holds a well-formed code
    return opaque.digest(code)


# ---- the token endpoint: the device polls (RFC 8628 3.4, 3.5) ------------------------------------------

@dataclass(frozen=True)
class DeviceCodeRequest:
    device_code: str
    resources: tuple[str, ...] = ()  # RFC 8707, normalised: narrows the token to some of the grant's


class DeviceCodeGrant(GrantType[DeviceCodeRequest]):
    """The device's poll: authorization_pending until the user answers (slow_down, and 5 s more
    between polls, when it polls sooner than its interval), then its tokens once, as a code
    redemption's (with a refresh token); access_denied, expired_token; invalid_grant for a device
    code that is not the client's or was used."""

    grant_type = DEVICE_CODE_GRANT_TYPE

    def parse(self, params: Mapping[str, Any]) -> DeviceCodeRequest:
        (device_code,) = require(params, "device_code")
        return DeviceCodeRequest(device_code, resource_indicators(params))

    async def issue(self, client: ClientCredentials, request: DeviceCodeRequest, proof: ProvenKey | None = None,
                    ) -> TokenSet:
        """One transaction records a DPoP proof's use, authenticates the client and either claims
        the approved device code with its refresh token, or records the poll and says why not."""
        key = proof.jkt if proof is not None else None
        now = int(self.clock.now())  # before the read (AccessTokens.issue_time)
        refresh_token = opaque.new_secret(opaque.REFRESH_TOKEN)
        well_formed = opaque.has_prefix(request.device_code, opaque.DEVICE_CODE)
        claimed, audience = await self.db.transaction(
            _poll, client=client, device_code_hash=opaque.digest(request.device_code) if well_formed else "",
            now=now, proof=proof, requested=request.resources, refresh_hash=opaque.digest(refresh_token),
            refresh_expires_at=now + self.settings.refresh_token_ttl, refresh_jkt=refresh_binding(client, key))
        assert claimed.user_id is not None and claimed.grant_id is not None and claimed.asu is not None
        return await self.issuer.issue(Issuance(
            client_id=client.client_id, user_id=claimed.user_id, asu=claimed.asu, grant_id=claimed.grant_id,
            scopes=tuple(claimed.scopes), audience=audience, refresh_token=refresh_token, started=now,
            sign_in=SignIn.remembered(claimed.auth_time, claimed.session_id, claimed.amr or "pwd"),
            id_token_alg=claimed.id_token_alg, jkt=key))


def _poll(conn: Connection, *, client: ClientCredentials, device_code_hash: str, now: int, proof: ProvenKey | None,
          requested: Sequence[str], **redemption: Any) -> tuple[DeviceCode, str | list[str] | None]:
    """The client's credentials first, its registration for the grant, then the device code:
    claimed with its refresh token (`repo.redeem`), or the reason it is not, raised. A resource
    the grant does not hold is invalid_target, raised before the commit: the claim is undone."""
    if proof is not None:
        spend_in(conn, proof)  # RFC 9449 11.1
    app = checked_client(conn, client.client_id, client.secret_digest)
    registered_for_device_grant(app)
    if app.requires_dpop and proof is None:  # RFC 9449 5.2
        raise errors.DPoPProofRefused("This app's tokens are all DPoP-bound: send a DPoP proof.")
    claimed = None
    if device_code_hash:
        claimed = repo.redeem(conn, device_code_hash=device_code_hash, app_id=app.id, now=now, **redemption)
    if claimed is None:
        raise _not_redeemed(conn, device_code_hash, app.id, now)
    return claimed, resources.audience(requested, claimed.resources)


def _not_redeemed(conn: Connection, device_code_hash: str, app_id: str, now: int) -> Exception:
    """Why the app's device code gave no tokens (RFC 8628 3.5). A pending one records this poll
    (committed, then raised): polled sooner than its interval after the last poll, it is slow_down
    and the interval grows by 5 s; otherwise authorization_pending."""
    row = repo.of_app(conn, device_code_hash, app_id) if device_code_hash else None
    if row is None:  # unknown, or another client's: as good as none
        return errors.DeviceCodeInvalid()
    if row.used_at is not None:
        return errors.DeviceCodeUsed()
    if row.denied_at is not None:
        return errors.DeviceAccessDenied()
    if row.expires_at <= now:
        return errors.ExpiredToken()
    too_soon = row.last_polled_at is not None and now - row.last_polled_at < row.interval
    repo.polled(conn, device_code_hash, now, row.interval + SLOW_DOWN_STEP if too_soon else row.interval)
    return CommitThenRaise(errors.SlowDown() if too_soon else errors.AuthorizationPending())
