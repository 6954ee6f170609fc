"""The authorization endpoint (RFC 6749 3.1 and 4.1; contract sections 5, 15 and 17), for the page
at {auth_url}/oauth/ and the envelope API's POST /api/oauth/authorize/external (spec 4.2) alike.

A request goes through one chain:

1. its client and redirect URI (`load_client`): a bad one is fatal, an error page, never a redirect;
2. its parameters (request.py), then the `REQUEST_STEPS`, each completing the request or refusing
   it; from here on every error goes back to the redirect URI (an `ErrorRedirect`);
3. the interaction policy (policy.py): the first prompt with a check that fires is asked (a page),
   or, under `prompt=none`, its error goes back to the client;
4. the code, under the user's grant (codes.py).

A new request parameter is a field of `AuthorizationRequest` read in request.py; a check on it is
one more entry of `REQUEST_STEPS`; a pushed request (PAR) replaces the parameters before step 2;
a new reason to ask the user is one more `Check` or `Interaction` of the policy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

from lbauth.clock import Clock
from lbauth.core import audit, resources, scopes, urls
from lbauth.core.accounts.sessions import SignedIn
from lbauth.core.oauth.authorization import request as parse
from lbauth.core.oauth.authorization.codes import issue_code
from lbauth.core.oauth.authorization.decisions import (
    CodeIssued,
    Decision,
    EnrolFactor,
    ErrorRedirect,
    SelectAccount,
    SignIn,
)
from lbauth.core.oauth.authorization.policy import POLICY, Interaction, Situation
from lbauth.core.oauth.authorization.pushed import Pushed, PushedRequests, names_pushed_request
from lbauth.core.oauth.authorization.request import Answer, AuthorizationRequest
from lbauth.core.oidc import requests as oidc_requests
from lbauth.core.oidc.id_tokens import hint_is_for, read_hint
from lbauth.core.registration.documents import ClientDocuments
from lbauth.errors import (
    AccessDenied,
    ApplicationNotFound,
    AuthorizationRedirect,
    InteractionRequired,
    LbauthError,
    MfaEnrolmentRequired,
    PushedRequestRequired,
    RedirectUriMismatch,
    ValidationFailed,
)
from lbauth.settings import Settings
from lbauth.storage.db import Database
from lbauth.storage.records import App, Authentication, Registration
from lbauth.storage.repo import apps as apps_repo


async def load_client(db: Database, client_id: Any, redirect_uri: Any,
                      documents: ClientDocuments | None = None, address: str | None = None) -> App:
    """The app and a redirect URI it may use, or a fatal error. With `documents`, a client id
    naming a metadata document loads (or fetches, for a caller at `address`) the client it
    registers (contract 17); without, only the stored copy is looked at. Only operator apps have the
    localhost rule."""
    if not isinstance(client_id, str) or not client_id:
        raise ValidationFailed("Field required: client_id")
    if documents is not None and documents.names_document(client_id):
        app: App | None = await documents.app(client_id, redirect_uri if isinstance(redirect_uri, str) else "",
                                              address)
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


RequestStep = Callable[["AuthorizationEndpoint", AuthorizationRequest], Awaitable[AuthorizationRequest]]


class AuthorizationEndpoint:
    """Built once, on the `AuthorizationServer`; `policy` is the interaction policy (policy.py)."""

    def __init__(self, db: Database, clock: Clock, settings: Settings, documents: ClientDocuments,
                 public_keys: Callable[[], dict[str, tuple[str, Any]]],
                 policy: Sequence[Interaction] = POLICY) -> None:
        self.db, self.clock, self.settings, self.documents = db, clock, settings, documents
        self._public_keys = public_keys  # the key ring's, for id_token_hint
        self.policy = tuple(policy)
        self.pushed = PushedRequests(db, clock)

    # ---- the request's steps (after its parameters; each returns the request, completed) -----------------

    async def resolve_resources(self, request: AuthorizationRequest) -> AuthorizationRequest:
        """RFC 8707 (contract 17): the registered resources the request names (an unknown one is
        invalid_target), and its scopes within their lists: requested scopes outside them are
        dropped, and a request without `scope` gets the app's scopes within them, never `openid`
        (nothing left: invalid_scope). A request naming no resource is returned as it is, with no
        statement."""
        if not request.resource_indicators:
            return request
        kept, named = await resources.resolve(self.db, request.resource_indicators, request.scopes,
                                              request.scope_sent, request.app.default_scopes)
        return replace(request, scopes=kept, resources=named)

    async def read_openid_parameters(self, request: AuthorizationRequest) -> AuthorizationRequest:
        """An OpenID request's parameters (contract 15); a request without `openid` ignores them."""
        if scopes.OPENID not in request.scopes:
            return request
        return replace(request, openid=oidc_requests.parse(request.parameters))

    async def check_id_token_hint(self, request: AuthorizationRequest) -> AuthorizationRequest:
        """The subject an id_token_hint names, checked before consent (contract 15): a hint that is
        not our ID token, or was issued to another client, is invalid_request."""
        if request.openid is None or request.openid.id_token_hint is None:
            return request
        claims = read_hint(request.openid.id_token_hint, self._public_keys(), self.settings.issuer)
        if not hint_is_for(claims, request.app.client_id):
            raise ValidationFailed("id_token_hint was issued to another client.")
        return replace(request, hinted_subject=claims["sub"])

    async def require_pushed(self, request: AuthorizationRequest) -> AuthorizationRequest:
        """RFC 9126 5: an app registered with `require_pushed_authorization_requests` sends only
        pushed requests to /oauth/."""
        if request.app.requires_pushed_requests and request.request_uri is None:
            raise PushedRequestRequired()
        return request

    REQUEST_STEPS: tuple[RequestStep, ...] = (require_pushed, resolve_resources, read_openid_parameters,
                                              check_id_token_hint)

    # ---- the pushed authorization request endpoint: POST /oauth/par (RFC 9126) ----------------------------

    async def push(self, app: App, params: Mapping[str, Sequence[str]]) -> Pushed:
        """RFC 9126 2.1: the parameters of an authenticated client's request, checked as /oauth/
        would check them, then kept. Every error is raised, for a JSON answer: nothing here is
        redirected (2.3)."""
        if "request_uri" in params:
            raise ValidationFailed("request_uri cannot be pushed")
        if params.get("client_id", [app.client_id]) != [app.client_id]:
            raise ValidationFailed("client_id must be the authenticated client's")
        redirect_uris = params.get("redirect_uri", [])
        if len(redirect_uris) != 1 or not _may_redirect(app, redirect_uris[0]):
            raise ValidationFailed("redirect_uri must be sent once, and be one the app may use")
        params = {**params, "client_id": [app.client_id]}
        request = parse.front_channel(app, params)
        for step in self.REQUEST_STEPS:
            if step is not AuthorizationEndpoint.require_pushed:
                request = await step(self, request)
        return await self.pushed.store(app, params)

    async def _pushed_parameters(self, params: Mapping[str, Sequence[str]],
                                 request_uri: str) -> Mapping[str, Sequence[str]]:
        """RFC 9126 4: a request by reference is the pushed request, whatever else the query says
        but its `client_id`, which must be the pushing client's."""
        client_ids = params.get("client_id", [])
        if len(client_ids) != 1:
            raise ValidationFailed("client_id must be sent exactly once")
        app = await self.db.read(apps_repo.by_client_id, client_ids[0])
        if app is None:
            raise ApplicationNotFound()
        return await self.pushed.parameters(app, request_uri)

    # ---- the front channel: {auth_url}/oauth/ ------------------------------------------------------------

    async def front_channel(self, params: Mapping[str, Sequence[str]], signed_in: SignedIn | None,
                            answer: Answer | None = None, address: str | None = None,
                            source: audit.Source = audit.NO_SOURCE) -> Decision:
        """A request by GET or form POST (`params`: each name with all its values), or the consent
        page's `answer` to it, from a browser at `address` (`source`: with its user agent, for the
        audit log) where `signed_in` may be None. A bad client or redirect URI is raised (an error
        page); everything else is a decision."""
        request_uri = _pushed_reference(params)
        if request_uri is not None:
            params = await self._pushed_parameters(params, request_uri)
        for name in ("client_id", "redirect_uri"):  # the two that decide whether redirecting is safe
            if len(params.get(name, [])) != 1:
                raise ValidationFailed(f"{name} must be sent exactly once")
        redirect_uri = params["redirect_uri"][0]
        app = await load_client(self.db, params["client_id"][0], redirect_uri, self.documents, address)
        try:
            request = replace(parse.front_channel(app, params), request_uri=request_uri)
            for step in self.REQUEST_STEPS:
                request = await step(self, request)
        except LbauthError as error:
            if not error.redirectable:
                raise
            if request_uri is not None:
                await self.pushed.spend(request_uri)
            return ErrorRedirect(AuthorizationRedirect(error, redirect_uri, parse.front_channel_state(params)))
        decision = await self.decide(request, signed_in, answer, source)
        return decision if request_uri is None else await self._pushed_decision(request_uri, decision)

    async def _pushed_decision(self, request_uri: str, decision: Decision) -> Decision:
        """A pushed request's page resumes from its reference, its parameters kept with it as the
        page left them (a `prompt=login` satisfied is not asked again); an error sent back spends
        it (a code spent it before it was issued)."""
        match decision:
            case SignIn() | EnrolFactor() | SelectAccount():
                await self.pushed.keep(request_uri, decision.resume)
                return replace(decision, resume=decision.request.posted_back())
            case ErrorRedirect():
                await self.pushed.spend(request_uri)
        return decision

    async def client_of(self, target: str) -> tuple[App, str] | None:
        """The app and the redirect URI that a path on this server (a sign-in page's `next`) leads
        to: for `/oauth/?...` with a known client and a redirect URI it may use, those; otherwise
        None, so that an attacker-chosen `next` earns no origin in a page's `form-action` and
        names no app on the sign-in page."""
        parts = urls.split(target)
        if parts is None or parts.path not in ("/oauth", "/oauth/"):
            return None
        params = parse_qs(parts.query, keep_blank_values=True)
        client_ids, redirect_uris = params.get("client_id", []), params.get("redirect_uri", [])
        if len(client_ids) != 1 or len(redirect_uris) != 1 or "\x00" in client_ids[0] + redirect_uris[0]:
            return None
        try:
            app = await load_client(self.db, client_ids[0], redirect_uris[0])
        except (ApplicationNotFound, RedirectUriMismatch, ValidationFailed):
            return None
        return app, redirect_uris[0]

    # ---- the envelope API: POST /api/oauth/authorize/external --------------------------------------------

    async def api_request(self, client_id: str, redirect_uri: str, scope: Any, *, state: Any = None,
                          code_challenge: Any = None, code_challenge_method: Any = None, resource: Any = None,
                          nonce: Any = None, address: str | None = None) -> AuthorizationRequest:
        """Spec 4.2's request, as its JSON types it; every error is an envelope (no redirect)."""
        app = await load_client(self.db, client_id, redirect_uri, self.documents, address)
        request = parse.check_api_request(app, redirect_uri, scope, state, code_challenge, code_challenge_method,
                                          resource)
        request = await self.resolve_resources(request)
        nonce = oidc_requests.checked_nonce(nonce)
        if scopes.OPENID not in request.scopes:
            return request
        return replace(request, openid=oidc_requests.OpenIdParameters(nonce))

    async def approve(self, request: AuthorizationRequest, signed_in: SignedIn,
                      source: audit.Source = audit.NO_SOURCE) -> CodeIssued:
        """The API's request is itself the user's approval, by a signed-in user (the user token):
        no page is ever needed, and a code is issued."""
        decision = await self.decide(request, signed_in, Answer.APPROVE, source)
        if isinstance(decision, ErrorRedirect):
            raise decision.refusal.error
        if isinstance(decision, EnrolFactor):
            raise MfaEnrolmentRequired()
        if not isinstance(decision, CodeIssued):
            raise InteractionRequired()
        return decision

    # ---- the decision -------------------------------------------------------------------------------------

    async def decide(self, request: AuthorizationRequest, signed_in: SignedIn | None,
                     answer: Answer | None = None, source: audit.Source = audit.NO_SOURCE) -> Decision:
        """The interaction policy, then the code: the first prompt with a check that fires shows
        its page (under `prompt=none`, its error goes back); the consent page's answer settles the
        prompt that showed it."""
        situation = Situation(request, signed_in, answer, self.clock.now(), self.db,
                              mfa_required=self.settings.mfa == "required")
        for interaction in self.policy:
            if interaction.answered and answer is Answer.DENY:
                return _refused(request, AccessDenied())
            if interaction.answered and answer is Answer.APPROVE:
                continue
            check = await interaction.firing(situation)
            if check is None:
                continue
            if situation.silent:
                return _refused(request, check.error())
            return await interaction.page(situation, check.reason)
        assert signed_in is not None, "the policy asks a visitor to sign in"
        if request.request_uri is not None:
            await self.pushed.spend(request.request_uri)  # once only (RFC 9126 7.3), before the code
        return CodeIssued(request, await self.issue(request, signed_in, source))

    async def issue(self, request: AuthorizationRequest, signed_in: SignedIn,
                    source: audit.Source = audit.NO_SOURCE) -> str:
        """The code, for an OpenID request remembering the sign-in of the session that approved
        (the browser's, or the user token's: contract 15's `sid`) and the nonce."""
        details = (oidc_requests.id_token_details(request.app, signed_in.session, request.openid.nonce)
                   if request.openid is not None else None)
        session = signed_in.session
        return await issue_code(self.db, self.clock, request, signed_in.user.id, self.settings.code_ttl, details,
                                Authentication(auth_time=session.authenticated_at, amr=session.amr), source)


def _pushed_reference(params: Mapping[str, Sequence[str]]) -> str | None:
    """The `request_uri` of a pushed request (RFC 9126 4), or None; any other `request_uri` is
    refused later as unsupported (RFC 9101)."""
    values = params.get("request_uri", [])
    if len(values) == 1 and names_pushed_request(values[0]):
        return values[0]
    if len(values) > 1:
        raise ValidationFailed("request_uri must be sent at most once")
    return None


def _refused(request: AuthorizationRequest, error: LbauthError) -> ErrorRedirect:
    return ErrorRedirect(AuthorizationRedirect(error, request.redirect_uri, request.state))
