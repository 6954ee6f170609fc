"""The authorization response (RFC 6749 4.1.2; contract 5): after the user's approval, the user's
grant for the app is created or extended and a single-use code is issued under it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lbauth.clock import Clock
from lbauth.core import audit, scopes
from lbauth.core.crypto import opaque
from lbauth.core.oauth.authorization.request import AuthorizationRequest
from lbauth.errors import TokenRevoked
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import Authentication, OpenIdDetails
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import users as users_repo

T = TypeVar("T")


@dataclass(frozen=True)
class Consent:
    """The app a user approves, and where from: the audit log's `consent.given`, recorded when the
    approval makes a grant or widens one (an approval within a grant changes nothing: no event)."""
    client_id: str
    app_name: str
    source: audit.Source = audit.NO_SOURCE

    def record(self, conn: Connection, user_id: str, approved: Sequence[str], resources: Sequence[str],
               now: int) -> None:
        audit.record(conn, now, audit.EventType.CONSENT_GIVEN, audit.Actor.user(user_id), source=self.source,
                     detail={"clientId": self.client_id, "app": self.app_name, "scopes": " ".join(approved),
                             "resources": " ".join(resources) or None})


def _issue_under_covering_grant(conn: Connection, request: AuthorizationRequest, user_id: str, code_hash: str,
                                now: int, ttl: int, authentication: Authentication,
                                openid: OpenIdDetails | None) -> bool:
    return codes_repo.insert_under_covering_grant(
        conn, user_id=user_id, app_id=request.app.id, code_hash=code_hash, redirect_uri=request.redirect_uri,
        scopes=list(request.scopes), challenge=request.code_challenge, now=now, expires_at=now + ttl,
        authentication=authentication, openid=openid,
        dpop_jkt=request.bound_key)


def _issue(conn: Connection, request: AuthorizationRequest, user_id: str, code_hash: str, now: int,
           ttl: int, authentication: Authentication, openid: OpenIdDetails | None, consent: Consent) -> None:
    app_id = request.app.id
    # Usually the user already has a live grant: the code is issued under it in one statement.
    issued = codes_repo.insert_from_live_grant(conn, user_id=user_id, app_id=app_id, code_hash=code_hash,
                                               redirect_uri=request.redirect_uri, scopes=list(request.scopes),
                                               challenge=request.code_challenge, now=now, expires_at=now + ttl,
                                               authentication=authentication, openid=openid,
                                               resources=request.resource_uris, dpop_jkt=request.bound_key)
    if issued is not None:
        if _extend_grant(conn, issued.grant_id, issued.grant_scopes, list(issued.grant_resources or ()),
                         request.scopes, request.resource_uris, now):
            consent.record(conn, user_id, request.scopes, request.resource_uris, now)
        return
    grant_id, asu = _new_grant(conn, app_id, user_id, request.scopes, request.resource_uris, now)
    consent.record(conn, user_id, request.scopes, request.resource_uris, now)
    codes_repo.insert_code(conn, code_hash=code_hash, app_id=app_id, user_id=user_id, grant_id=grant_id, asu=asu,
                           redirect_uri=request.redirect_uri, scopes=list(request.scopes),
                           code_challenge=request.code_challenge, now=now, expires_at=now + ttl,
                           authentication=authentication, openid=openid, resources=request.resource_uris,
                           dpop_jkt=request.bound_key)


def _extend_grant(conn: Connection, grant_id: str, held: Sequence[str], held_resources: list[str],
                  approved: Sequence[str], approved_resources: Sequence[str], now: int) -> bool:
    """A second approval extends the grant to the union of the scopes and resources approved; True
    when that is more than it held."""
    union = [s for s in scopes.ALL if s in held or s in approved]
    more = [uri for uri in approved_resources if uri not in held_resources]
    if union != list(held) or more:
        grants_repo.set_scopes(conn, grant_id, union, now, resources=held_resources + more if more else None)
        return True
    return False


def _new_grant(conn: Connection, app_id: str, user_id: str, approved: Sequence[str],
               approved_resources: list[str], now: int) -> tuple[str, str]:
    """A first approval: a new grant, and the app-scoped user id (made once per app and user);
    Duplicate when a concurrent approval made either first."""
    if not users_repo.lock_if_active(conn, user_id):  # disabled or deleted since this session was checked
        raise TokenRevoked("This session has ended; sign in again.")
    grant_id = opaque.new_id("gnt_")
    grants_repo.insert_grant(conn, grant_id=grant_id, app_id=app_id, user_id=user_id, scopes=list(approved),
                             now=now, resources=approved_resources)
    asu = grants_repo.subject(conn, user_id, app_id)
    if asu is None:  # created once per (app, user), never changed
        asu = opaque.new_id("asu_")
        grants_repo.insert_subject(conn, app_id=app_id, user_id=user_id, asu=asu, now=now)
    return grant_id, asu


def grant_for(conn: Connection, app_id: str, user_id: str, approved: Sequence[str],
              approved_resources: list[str], now: int, consent: Consent) -> tuple[str, str]:
    """The grant an approval other than a code's is made under (the device grant's, RFC 8628
    3.3), as `issue_code` makes a code's: the user's live grant extended to what was approved, or
    a new one; its id and the app-scoped user id. Locks as a code's issuing does."""
    live = grants_repo.live_grant_locked(conn, user_id, app_id)
    if live is None:
        made = _new_grant(conn, app_id, user_id, approved, approved_resources, now)
        consent.record(conn, user_id, approved, approved_resources, now)
        return made
    assert live.asu is not None  # a grant's subject is made with it (_new_grant)
    if _extend_grant(conn, live.id, live.scopes, list(live.resources), approved, approved_resources, now):
        consent.record(conn, user_id, approved, approved_resources, now)
    return live.id, live.asu


async def retrying_duplicates(db: Database, work: Callable[..., T], *args: Any) -> T:
    """`work` in a transaction, run again (three runs at most) when a unique key refuses its insert
    (Duplicate): a concurrent approval created the grant or subject first, which the next run finds
    and extends; or a value it drew at random was taken, and the next run draws another."""
    for attempt in range(3):
        try:
            return await db.transaction(work, *args)
        except Duplicate:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def issue_code(db: Database, clock: Clock, request: AuthorizationRequest, user_id: str, ttl: int,
                     openid: OpenIdDetails | None = None, authentication: Authentication | None = None,
                     source: audit.Source = audit.NO_SOURCE) -> str:
    """Create or extend the grant, then issue a code for the requested scopes, remembering the
    sign-in behind it (its tokens' `auth_time`, `amr` and `acr`: contract 19; a password sign-in
    now when not given) and, for an OpenID request, what its ID token will say (contract 15). A
    grant made or widened is the user's consent, in the audit log (from `source`)."""
    code, now = opaque.new_secret(opaque.CODE), int(clock.now())
    code_hash = opaque.digest(code)
    authentication = authentication or Authentication(auth_time=now, amr="pwd")
    if not request.resource_uris and await db.transaction(_issue_under_covering_grant, request, user_id, code_hash,
                                                          now, ttl, authentication, openid, single_statement=True):
        return code  # the common case: one statement, one round trip, no transaction around it
    consent = Consent(request.app.client_id, request.app.name, source)
    await retrying_duplicates(db, _issue, request, user_id, code_hash, now, ttl, authentication, openid, consent)
    return code
