"""GET/POST {auth_url}/oauth/: the authorization page (spec 4.1, contract sections 5 and 15).

GET (or a relying party's form POST, OpenID Connect Core 3.1.2.1, which carries no XSRF token)
validates the request, asks a visitor to sign in, and shows the consent page (or, when the user's
live grant already covers the request, redirects with a code at once). The consent form's POST is
the user's Approve or Deny, with an XSRF token and a `decision`; the request is validated again
from the posted fields. An OpenID request's prompt, max_age, login_hint and id_token_hint decide
which pages it may show (none, with prompt=none).
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from lbauth.core import scopes, urls
from lbauth.core.oauth import authorize
from lbauth.core.oauth.authorize import AuthorizationRequest
from lbauth.core.oidc import requests as oidc_requests
from lbauth.core.oidc.id_tokens import hint_is_for, read_hint
from lbauth.errors import (
    AccessDenied,
    AuthorizationRedirect,
    ConsentRequired,
    LbauthError,
    LoginRequired,
    ValidationFailed,
)
from lbauth.handlers.pages import PageHandler, with_query
from lbauth.storage.records import App, Registration

_REQUEST_FIELDS = ("client_id", "redirect_uri", "response_type", "state", "scope", "code_challenge",
                   "code_challenge_method", "nonce", "resource")
_LISTS = ("resource",)  # may repeat (RFC 8707 2)


class AuthorizePage(PageHandler):

    def error_page_status(self, error: LbauthError) -> int:
        """A bad client or redirect URI: an error page with 400, never a redirect (contract 5)."""
        return error.page_status or error.status

    async def get(self) -> None:
        params = self.query_lists()
        await self.handle(params, decision=None)

    async def post(self) -> None:
        posted = self.form_body(_LISTS)
        if "decision" not in posted:
            # A relying party's form POST (OpenID Connect Core 3.1.2.1): the request itself, no XSRF.
            await self.handle({name: _values(value) for name, value in posted.items()}, decision=None)
            return
        form = self.form(_LISTS)
        decision = form.pop("decision", None)
        if decision not in ("approve", "deny"):
            raise ValidationFailed("decision must be approve or deny")
        params = {name: _values(value) for name, value in form.items() if name in _REQUEST_FIELDS}
        await self.handle(params, decision)

    async def handle(self, params: dict[str, list[str]], decision: str | None) -> None:
        for name in ("client_id", "redirect_uri"):  # the two that decide whether redirecting is safe
            if len(params.get(name, [])) != 1:
                raise ValidationFailed(f"{name} must be sent exactly once")
        app = await authorize.load_client(self.services.db, params["client_id"][0], params["redirect_uri"][0],
                                          self.services.client_documents)
        try:
            request = await authorize.with_resources(self.services.db, authorize.check_front_channel(app, params))
            openid = self.openid_parameters(request, params)
            await self.decide(request, params, openid, decision)
        except AuthorizationRedirect as refusal:  # the redirect URI is known good from here on
            self.send_to_client(refusal.redirect_uri, refusal.params())

    def openid_parameters(self, request: AuthorizationRequest,
                          params: dict[str, list[str]]) -> oidc_requests.OpenIdParameters | None:
        if scopes.OPENID not in request.scopes:
            return None
        try:
            return oidc_requests.parse(params)
        except LbauthError as error:
            raise AuthorizationRedirect(error, request.redirect_uri, request.state) from None

    async def decide(self, request: AuthorizationRequest, params: dict[str, list[str]],
                     openid: oidc_requests.OpenIdParameters | None, decision: str | None) -> None:
        """Sign-in, then the user's decision: a code, the consent page, or AuthorizationRedirect."""
        s = self.services
        prompt = openid.prompt if openid else frozenset()

        def refuse(error: LbauthError) -> AuthorizationRedirect:
            return AuthorizationRedirect(error, request.redirect_uri, request.state)

        hinted = await self.hinted_subject(request, openid)
        signed_in_long_ago = (openid is not None and openid.max_age is not None and self.session is not None
                              and s.clock.now() - self.session.session.authenticated_at > openid.max_age)
        if "none" in prompt:  # no page at all (contract 15)
            if self.user is None or signed_in_long_ago:
                raise refuse(LoginRequired())
            if hinted is not None and hinted != await authorize.subject_of(s.db, self.user.id, request.app.id):
                raise refuse(LoginRequired("The signed-in user is not the one the id_token_hint names."))
            if request.unregistered_loopback or not await authorize.grant_covers(s.db, self.user.id, request):
                raise refuse(ConsentRequired())
            await self.issue(request, openid)
            return
        if decision is None and (self.user is None or signed_in_long_ago or "login" in prompt):
            self.allow_form_to(request.redirect_uri)  # the sign-in may end at the client (contract 5)
            email = (openid.login_hint if openid and openid.login_hint else
                     (self.user.email if self.user is not None else ""))
            self.login_form(_after_sign_in(params), email=email or "")
            return
        if self.user is None:  # a consent form posted after signing out
            self.allow_form_to(request.redirect_uri)
            self.login_form("/oauth/?" + _query(request))
            return
        if decision is None and "select_account" in prompt:
            self.render_page("select_account.html", app=request.app,
                             continue_url="/oauth/?" + urlencode(_without(params, prompt="select_account")))
            return
        if decision == "deny":
            raise refuse(AccessDenied())
        # A program on the device listening at an unregistered loopback URI is shown to the user
        # every time: no code goes there without consent (contract 5); prompt=consent asks again.
        if decision == "approve" or ("consent" not in prompt and not request.unregistered_loopback
                                     and await authorize.grant_covers(s.db, self.user.id, request)):
            await self.issue(request, openid)
            return
        self.consent_page(request, openid)

    async def hinted_subject(self, request: AuthorizationRequest,
                             openid: oidc_requests.OpenIdParameters | None) -> str | None:
        """The subject an id_token_hint names, checked before consent (contract 15): a hint that is
        not our ID token, or was issued to another client, is invalid_request."""
        if openid is None or openid.id_token_hint is None:
            return None
        try:
            claims = read_hint(openid.id_token_hint, self.services.keyring.public_keys, self.services.settings.issuer)
            if not hint_is_for(claims, request.app.client_id):
                raise ValidationFailed("id_token_hint was issued to another client.")
        except LbauthError as error:
            raise AuthorizationRedirect(error, request.redirect_uri, request.state) from None
        return claims["sub"]

    async def issue(self, request: AuthorizationRequest, openid: oidc_requests.OpenIdParameters | None) -> None:
        s = self.services
        assert self.user is not None and self.session is not None
        details = (oidc_requests.id_token_details(request.app, self.session.session, openid.nonce)
                   if openid is not None else None)
        code = await authorize.issue_code(s.db, s.clock, request, self.user.id, s.settings.code_ttl, details)
        self.send_to_client(request.redirect_uri, {"code": code, "state": request.state})

    def consent_page(self, request: AuthorizationRequest, openid: oidc_requests.OpenIdParameters | None) -> None:
        self.allow_form_to(request.redirect_uri)
        hidden = _hidden_fields(request)
        if openid is not None and openid.nonce is not None:
            hidden.append(("nonce", openid.nonce))
        self.render_page("consent.html", app=request.app, request=request, registered_by=_registered_by(request.app),
                         scopes=[(name, scopes.SCOPES[name]) for name in request.scopes], resources=request.resources,
                         hidden=hidden, redirect_host=urlsplit(request.redirect_uri).netloc)

    def send_to_client(self, redirect_uri: str, params: dict[str, str | None]) -> None:
        """302 after a GET, 303 after a POST: never 307, which would re-POST the form (RFC 9700 4.11).
        Every answer carries `iss` (RFC 9207). After a form, a redirect URI that no CSP source may
        name is reached by a navigation instead (PageHandler.continue_page)."""
        target = with_query(redirect_uri, {**params, "iss": self.services.settings.issuer})
        if self.request.method != "POST":
            self.redirect(target, status=302)
        elif urls.form_action_source(redirect_uri) is None:
            self.continue_page(target, "Return to the app", "Your choice is sent to the app that asked.")
        else:
            self.redirect(target, status=303)


def _registered_by(app: App) -> dict[str, str | None] | None:
    """What the consent page says of an app that registered itself (contract 17): not verified by
    the operator; for a metadata document, the host that publishes it and its `client_uri`. None
    for an operator's app."""
    if app.registration == Registration.OPERATOR:
        return None
    metadata = app.client_metadata or {}
    client_uri = metadata.get("client_uri")
    return {"kind": app.registration,
            "client_id_host": urlsplit(app.client_id).hostname if app.registration == Registration.DOCUMENT else None,
            "client_uri": client_uri if isinstance(client_uri, str) and client_uri.startswith(("https://", "http://"))
            else None}


def _hidden_fields(request: AuthorizationRequest) -> list[tuple[str, str]]:
    fields = [("client_id", request.app.client_id), ("redirect_uri", request.redirect_uri),
              ("response_type", "code"), ("scope", " ".join(request.scopes))]
    if request.state is not None:  # a request without state comes back without one (contract 5)
        fields.append(("state", request.state))
    if request.code_challenge:
        fields += [("code_challenge", request.code_challenge), ("code_challenge_method", "S256")]
    fields += [("resource", resource.uri) for resource in request.resources]
    return fields


def _values(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def _query(request: AuthorizationRequest) -> str:
    return urlencode(_hidden_fields(request))


def _without(params: dict[str, list[str]], *, prompt: str) -> list[tuple[str, str]]:
    """The request's parameters with one prompt value taken out (and max_age, for `login`: the
    sign-in made for this very request satisfies it, so max_age=0 signs in once, not forever)."""
    pairs = []
    for name, values in params.items():
        for value in values:
            if name == "prompt":
                value = " ".join(v for v in value.split() if v != prompt)
                if not value:
                    continue
            if name == "max_age" and prompt == "login":
                continue
            pairs.append((name, value))
    return pairs


def _after_sign_in(params: dict[str, list[str]]) -> str:
    """Where a sign-in asked for by the request (no one signed in, prompt=login, max_age) comes back."""
    return "/oauth/?" + urlencode(_without(params, prompt="login"))
