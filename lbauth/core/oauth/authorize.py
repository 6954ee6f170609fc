"""Authorization (spec 4.1 and 4.2, contract section 5), in two phases as RFC 6749 4.1.1 reads:

1. validate the request: a bad client or redirect URI is fatal and never redirected to
   (`ApplicationNotFound`, `RedirectUriMismatch`); once the redirect URI is known good, every
   other failure is an `AuthorizationRedirect` wrapping the error, with the request's `state`;
2. after consent, `issue_code` creates or extends the user's grant and issues a single-use code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lbauth.clock import Clock
from lbauth.core import resources, scopes, urls
from lbauth.core.crypto import opaque
from lbauth.core.registration.documents import ClientDocuments
from lbauth.errors import (
    ApplicationNotFound,
    AuthorizationRedirect,
    LbauthError,
    RedirectUriMismatch,
    ResponseTypeUnsupported,
    ScopeInvalid,
    TokenRevoked,
    ValidationFailed,
)
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import App, OpenIdDetails, Registration, Resource
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import users as users_repo

_CHALLENGE = re.compile(r"[A-Za-z0-9\-._~]{43,128}")  # RFC 7636 4.2
MAX_STATE_LENGTH = 1024


@dataclass(frozen=True)
class AuthorizationRequest:
    """A validated request: what the consent page shows and what the code will remember."""
    app: App
    redirect_uri: str
    scopes: tuple[str, ...]
    state: str | None
    code_challenge: str | None
    # RFC 8707 (contract 17): the `resource` values, normalised; after `with_resources`, the
    # registered resources they name (whose URIs the code remembers).
    resource_indicators: tuple[str, ...] = ()
    resources: tuple[Resource, ...] = ()
    scope_sent: bool = True

    @property
    def resource_uris(self) -> list[str]:
        return [r.uri for r in self.resources]

    @property
    def to_own_device(self) -> bool:
        """The redirect goes to a program on the user's own device (a loopback URI)."""
        return urls.goes_to_this_device(self.redirect_uri)

    @property
    def unregistered_loopback(self) -> bool:
        """Admitted by the localhost rule alone: always shown the consent page (contract 5), since
        anything on the device may listen there."""
        return not urls.is_registered(self.redirect_uri, list(self.app.redirect_uris))


async def load_client(db: Database, client_id: Any, redirect_uri: Any,
                      documents: ClientDocuments | None = None) -> App:
    """Phase 1a: the app and a redirect URI it may use, or a fatal error. With `documents`, a
    client id naming a metadata document loads (or fetches) the client it registers (contract 17);
    without, only the stored copy is looked at. Only operator apps have the localhost rule."""
    if not isinstance(client_id, str) or not client_id:
        raise ValidationFailed("Field required: client_id")
    if documents is not None and documents.names_document(client_id):
        app: App | None = await documents.app(client_id)
    else:
        app = await db.read(apps_repo.by_client_id, client_id)
    if app is None:
        raise ApplicationNotFound()
    if not isinstance(redirect_uri, str) or not _may_redirect(app, redirect_uri):
        raise RedirectUriMismatch()
    return app


def _may_redirect(app: App, uri: str) -> bool:
    """A registered URI (a loopback one on any port) for every app; the localhost rule for unregistered
    URIs only for an operator's app: a self-registered one lists all its URIs itself (contract 5)."""
    registered = list(app.redirect_uris)
    if app.registration == Registration.OPERATOR:
        return urls.redirect_allowed(uri, registered)
    return urls.is_registered(uri, registered)


async def redirect_uri_of(db: Database, target: str) -> str | None:
    """The redirect URI that a path on this server (a sign-in page's `next`) leads to: for
    `/oauth/?...` with a known client and a redirect URI it may use, that URI; otherwise None, so
    that an attacker-chosen `next` earns no origin in a page's `form-action` (contract 5)."""
    parts = urlsplit(target)
    if parts.path not in ("/oauth", "/oauth/"):
        return None
    params = parse_qs(parts.query, keep_blank_values=True)
    client_ids, redirect_uris = params.get("client_id", []), params.get("redirect_uri", [])
    if len(client_ids) != 1 or len(redirect_uris) != 1 or "\x00" in client_ids[0] + redirect_uris[0]:
        return None
    try:
        await load_client(db, client_ids[0], redirect_uris[0])
    except (ApplicationNotFound, RedirectUriMismatch, ValidationFailed):
        return None
    return redirect_uris[0]


def check_front_channel(app: App, params: Mapping[str, Sequence[str]]) -> AuthorizationRequest:
    """Phase 1b for GET {auth_url}/oauth/: every parameter once; response_type, state, scope, PKCE.
    `params` maps each name to all the values sent (so repeats can be seen). The redirect URI is
    known good here: every error is an AuthorizationRedirect (RFC 6749 4.1.2.1)."""
    redirect_uri = params["redirect_uri"][0]
    states = params.get("state", [])
    state = states[0] if len(states) == 1 and states[0] else None  # empty: omitted (RFC 6749 3.1)
    try:
        return _front_channel_request(app, params, redirect_uri, state)
    except LbauthError as error:
        if not error.redirectable:
            raise
        raise AuthorizationRedirect(error, redirect_uri, state) from None


def _front_channel_request(app: App, params: Mapping[str, Sequence[str]], redirect_uri: str,
                           state: str | None) -> AuthorizationRequest:
    repeated = sorted(name for name, values in params.items() if len(values) > 1 and name != "resource")
    if repeated:
        raise ValidationFailed(f"Parameter sent more than once: {repeated[0][:40]}")
    response_type = _one(params, "response_type")
    if not response_type:
        raise ValidationFailed("response_type is required")
    if response_type != "code":
        raise ResponseTypeUnsupported()
    if not state and not _one(params, "code_challenge"):
        # Contract 5: with a PKCE challenge, state may be left out (OAuth 2.1 4.1.1); PKCE is then
        # the client's CSRF protection.
        raise ValidationFailed("state is required (or a PKCE code_challenge)")
    if state and len(state) > MAX_STATE_LENGTH:
        raise ValidationFailed(f"state must be at most {MAX_STATE_LENGTH} characters")
    scope = _one(params, "scope")
    requested = scopes.parse_space_separated(scope) if scope is not None else tuple(app.default_scopes)
    _check_allowed(app, requested)
    challenge = _check_pkce(_one(params, "code_challenge"), _one(params, "code_challenge_method"), app)
    return AuthorizationRequest(app, redirect_uri, requested, state, challenge,
                                resource_indicators=resources.parse(params.get("resource", ())),
                                scope_sent=scope is not None)


async def with_resources(db: Database, request: AuthorizationRequest) -> AuthorizationRequest:
    """Phase 1c for GET {auth_url}/oauth/: `resolve_resources`, its errors at the redirect URI."""
    try:
        return await resolve_resources(db, request)
    except LbauthError as error:
        raise AuthorizationRedirect(error, request.redirect_uri, request.state) from None


async def resolve_resources(db: Database, request: AuthorizationRequest) -> AuthorizationRequest:
    """Phase 1c, RFC 8707 (contract 17): the registered resources the request names (an unknown
    one is invalid_target), and its scopes within their lists: requested scopes outside them are
    dropped, and a request without `scope` gets the app's scopes within them, never `openid`
    (nothing left: invalid_scope). A request naming no resource is returned as it is, with no
    statement."""
    if not request.resource_indicators:
        return request
    named = await resources.registered(db, request.resource_indicators)
    if request.scope_sent:
        kept = resources.allowed_scopes(request.scopes, named)
    else:
        kept = resources.default_scopes(request.app.default_scopes, named)
    if not kept:
        raise ScopeInvalid("None of the requested scopes is allowed for the requested resource.")
    return replace(request, scopes=kept, resources=named)


def check_api_request(app: App, redirect_uri: str, scope: Any, state: Any, challenge: Any,
                      method: Any, resource: Any = None) -> AuthorizationRequest:
    """Phase 1b for POST /api/oauth/authorize/external (spec 4.2): errors are envelopes. `scope` is
    a JSON array of strings, as spec 4.2 types it: a bare string is refused, not split (contract 5);
    `resource` (RFC 8707, contract 17), when sent, an array of strings too."""
    if resource is not None and (not isinstance(resource, list) or not all(isinstance(r, str) for r in resource)):
        raise ValidationFailed("resource must be an array of strings")
    if not isinstance(scope, list) or not all(isinstance(s, str) for s in scope):
        raise ValidationFailed("scope must be an array of strings")
    requested = scopes.requested(scope)
    if not requested:
        raise ScopeInvalid("At least one scope is required.")
    _check_allowed(app, requested)
    if state is not None and (not isinstance(state, str) or len(state) > MAX_STATE_LENGTH):
        raise ValidationFailed(f"state must be a string of at most {MAX_STATE_LENGTH} characters")
    for value in (challenge, method):
        if value is not None and not isinstance(value, str):
            raise ValidationFailed("codeChallenge and codeChallengeMethod must be strings")
    return AuthorizationRequest(app, redirect_uri, requested, state, _check_pkce(challenge, method, app),
                                resource_indicators=resources.parse(resource or ()))


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def _check_allowed(app: App, requested: tuple[str, ...]) -> None:
    if not requested:
        raise ScopeInvalid("At least one scope is required.")
    refused = [s for s in requested if s not in app.scopes]
    if refused:
        raise ScopeInvalid(f"This app may not request the scope {refused[0]}.")


def _check_pkce(challenge: str | None, method: str | None, app: App) -> str | None:
    """RFC 7636 4.3, S256 only: `plain` would send the verifier's equivalent in the clear. Required
    of a public client (contract 17; OAuth 2.1 7.5.1): its code is all that a thief would need."""
    if challenge is None and method is None:
        if app.public:
            raise ValidationFailed("A public client must send a PKCE code_challenge (code_challenge_method S256).")
        return None
    if not challenge:
        raise ValidationFailed("code_challenge_method was sent without code_challenge")
    if method != "S256":
        raise ValidationFailed("code_challenge_method must be S256")
    if not _CHALLENGE.fullmatch(challenge):
        raise ValidationFailed("code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]")
    return challenge


async def grant_covers(db: Database, user_id: str, request: AuthorizationRequest) -> bool:
    """True when the user's live grant already holds every requested scope and resource (no need to ask)."""
    grant = await db.read(grants_repo.live_grant, user_id, request.app.id)
    return (grant is not None and set(request.scopes) <= set(grant.scopes)
            and set(request.resource_uris) <= set(grant.resources))


def _issue(conn: Connection, request: AuthorizationRequest, user_id: str, code_hash: str, now: int,
           ttl: int, openid: OpenIdDetails | None) -> None:
    app_id = request.app.id
    # Usually the user already has a live grant: the code is issued under it in one statement.
    issued = codes_repo.insert_from_live_grant(conn, user_id=user_id, app_id=app_id, code_hash=code_hash,
                                               redirect_uri=request.redirect_uri, scopes=list(request.scopes),
                                               challenge=request.code_challenge, now=now, expires_at=now + ttl,
                                               openid=openid, resources=request.resource_uris)
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
                           code_challenge=request.code_challenge, now=now, expires_at=now + ttl, openid=openid,
                           resources=request.resource_uris)


async def issue_code(db: Database, clock: Clock, request: AuthorizationRequest, user_id: str, ttl: int,
                     openid: OpenIdDetails | None = None) -> str:
    """After consent: create or extend the grant, then issue a code for the requested scopes (for an
    OpenID request, remembering what its ID token will say: contract 15)."""
    code = opaque.new_secret(opaque.CODE)
    for attempt in range(3):
        try:
            await db.transaction(_issue, request, user_id, opaque.digest(code), int(clock.now()), ttl, openid)
            return code
        except Duplicate:
            # A concurrent approval created the grant or subject first: run again and extend it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")



async def subject_of(db: Database, user_id: str, app_id: str) -> str | None:
    """The user's appScopedUserId for the app, if one was made (an ID token hint names it)."""
    return await db.read(grants_repo.subject, user_id, app_id)
