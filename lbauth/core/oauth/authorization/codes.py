"""The authorization response (RFC 6749 4.1.2; contract 5): after the user's approval, the user's
grant for the app is created or extended and a single-use code is issued under it."""

from __future__ import annotations

from lbauth.clock import Clock
from lbauth.core import scopes
from lbauth.core.crypto import opaque
from lbauth.core.oauth.authorization.request import AuthorizationRequest
from lbauth.errors import TokenRevoked
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import Authentication, OpenIdDetails
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import users as users_repo


def _issue_under_covering_grant(conn: Connection, request: AuthorizationRequest, user_id: str, code_hash: str,
                                now: int, ttl: int, authentication: Authentication,
                                openid: OpenIdDetails | None) -> bool:
    return codes_repo.insert_under_covering_grant(
        conn, user_id=user_id, app_id=request.app.id, code_hash=code_hash, redirect_uri=request.redirect_uri,
        scopes=list(request.scopes), challenge=request.code_challenge, now=now, expires_at=now + ttl,
        authentication=authentication, openid=openid,
        dpop_jkt=request.bound_key)


def _issue(conn: Connection, request: AuthorizationRequest, user_id: str, code_hash: str, now: int,
           ttl: int, authentication: Authentication, openid: OpenIdDetails | None) -> None:
    app_id = request.app.id
    # Usually the user already has a live grant: the code is issued under it in one statement.
    issued = codes_repo.insert_from_live_grant(conn, user_id=user_id, app_id=app_id, code_hash=code_hash,
                                               redirect_uri=request.redirect_uri, scopes=list(request.scopes),
                                               challenge=request.code_challenge, now=now, expires_at=now + ttl,
                                               authentication=authentication, openid=openid,
                                               resources=request.resource_uris, dpop_jkt=request.bound_key)
    if issued is not None:
        held = tuple(issued.grant_scopes)
        union = [s for s in scopes.ALL if s in held or s in request.scopes]
        held_resources = list(issued.grant_resources or ())
        more = [uri for uri in request.resource_uris if uri not in held_resources]
        if union != list(held) or more:  # a second approval extends the grant to the union
            grants_repo.set_scopes(conn, issued.grant_id, union, now, resources=held_resources + more if more else None)
        return
    if not users_repo.lock_if_active(conn, user_id):  # disabled or deleted since this session was checked
        raise TokenRevoked("This session has ended; sign in again.")
    grant_id = opaque.new_id("gnt_")
    grants_repo.insert_grant(conn, grant_id=grant_id, app_id=app_id, user_id=user_id, scopes=list(request.scopes),
                             now=now, resources=request.resource_uris)
    asu = grants_repo.subject(conn, user_id, app_id)
    if asu is None:  # created once per (app, user), never changed
        asu = opaque.new_id("asu_")
        grants_repo.insert_subject(conn, app_id=app_id, user_id=user_id, asu=asu, now=now)
    codes_repo.insert_code(conn, code_hash=code_hash, app_id=app_id, user_id=user_id, grant_id=grant_id, asu=asu,
                           redirect_uri=request.redirect_uri, scopes=list(request.scopes),
                           code_challenge=request.code_challenge, now=now, expires_at=now + ttl,
                           authentication=authentication, openid=openid, resources=request.resource_uris,
                           dpop_jkt=request.bound_key)


async def issue_code(db: Database, clock: Clock, request: AuthorizationRequest, user_id: str, ttl: int,
                     openid: OpenIdDetails | None = None, authentication: Authentication | None = None) -> str:
    """Create or extend the grant, then issue a code for the requested scopes, remembering the
    sign-in behind it (its tokens' `auth_time`, `amr` and `acr`: contract 19; a password sign-in
    now when not given) and, for an OpenID request, what its ID token will say (contract 15)."""
    code, now = opaque.new_secret(opaque.CODE), int(clock.now())
    code_hash = opaque.digest(code)
    authentication = authentication or Authentication(auth_time=now, amr="pwd")
    if not request.resource_uris and await db.transaction(_issue_under_covering_grant, request, user_id, code_hash,
                                                          now, ttl, authentication, openid, single_statement=True):
        return code  # the common case: one statement, one round trip, no transaction around it
    for attempt in range(3):
        try:
            await db.transaction(_issue, request, user_id, code_hash, now, ttl, authentication, openid)
            return code
        except Duplicate:
            # A concurrent approval created the grant or subject first: run again and extend it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
