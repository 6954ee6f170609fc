"""GET/POST {auth_url}/oauth/: the authorization page (spec 4.1, contract sections 5 and 15).

GET (or a relying party's form POST, OpenID Connect Core 3.1.2.1, which carries no XSRF token)
validates the request, asks a visitor to sign in, and shows the consent page (or, when the user's
live grant already covers the request, redirects with a code at once). The consent form's POST is
the user's Approve or Deny, with an XSRF token and a `decision`; the request is validated again
from the posted fields. An OpenID request's prompt, max_age, login_hint and id_token_hint decide
which pages it may show (none, with prompt=none).
"""

from __future__ import annotations

from urllib.parse import urlencode

from lbauth.core import scopes, urls
from lbauth.core.oauth.authorization.decisions import (
    CodeIssued,
    Consent,
    EnrolFactor,
    ErrorRedirect,
    SelectAccount,
    SignIn,
)
from lbauth.core.oauth.authorization.request import Answer, AuthorizationRequest
from lbauth.core.urls import with_query
from lbauth.errors import LbauthError, ValidationFailed
from lbauth.handlers.pages import PageHandler
from lbauth.storage.records import App, Registration

_REQUEST_FIELDS = ("client_id", "redirect_uri", "response_type", "state", "scope", "code_challenge",
                   "code_challenge_method", "nonce", "resource", "request_uri", "dpop_jkt", "acr_values")
_LISTS = ("resource",)  # may repeat (RFC 8707 2)


class AuthorizePage(PageHandler):
    open_before_enrolment = True  # LBAUTH_MFA=required: see PageHandler

    def error_page_status(self, error: LbauthError) -> int:
        """A bad client or redirect URI: an error page with 400, never a redirect (contract 5)."""
        return error.page_status or error.status

    async def get(self) -> None:
        await self.handle(self.query_lists(), answer=None)

    async def post(self) -> None:
        posted = self.form_body(_LISTS)
        if "decision" not in posted:
            # A relying party's form POST (OpenID Connect Core 3.1.2.1): the request itself, no XSRF.
            await self.handle({name: _values(value) for name, value in posted.items()}, answer=None)
            return
        form = self.form(_LISTS)
        decision = form.pop("decision", None)
        if decision not in tuple(Answer):
            raise ValidationFailed("decision must be approve or deny")
        params = {name: _values(value) for name, value in form.items() if name in _REQUEST_FIELDS}
        await self.handle(params, Answer(decision))

    async def handle(self, params: dict[str, list[str]], answer: Answer | None) -> None:
        """The endpoint decides (core/oauth/authorization); this renders its decision."""
        decision = await self.services.oauth.authorization_endpoint.front_channel(params, self.session, answer,
                                                                               self.request.remote_ip, self.source())
        match decision:
            case CodeIssued() | ErrorRedirect():
                self.send_to_client(decision.redirect_uri, decision.params())
            case SignIn():
                self.allow_form_to(decision.request.redirect_uri)  # the sign-in may end at the client (contract 5)
                self.login_form("/oauth/?" + urlencode(decision.resume), email=decision.email,
                                app=decision.request.app, passkey_required=decision.passkey_required)
            case EnrolFactor():
                self.enrol_first("/oauth/?" + urlencode(decision.resume))
            case SelectAccount():
                self.render_page("select_account.html", app=decision.request.app,
                                 continue_url="/oauth/?" + urlencode(decision.resume))
            case Consent():
                self.consent_page(decision.request)

    def consent_page(self, request: AuthorizationRequest) -> None:
        self.allow_form_to(request.redirect_uri)
        hidden = request.posted_back()
        if request.nonce is not None and request.request_uri is None:
            hidden.append(("nonce", request.nonce))
        self.render_page("consent.html", app=request.app, request=request, registered_by=registered_by(request.app),
                         scopes=[(name, scopes.SCOPES[name]) for name in request.scopes], resources=request.resources,
                         hidden=hidden, redirect_host=urls.display_host(request.redirect_uri))

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


def registered_by(app: App) -> dict[str, str | None] | None:
    """What the consent page says of an app that registered itself (contract 17): not verified by
    the operator; for a metadata document, the host that publishes it and its `client_uri`. None
    for an operator's app."""
    if app.registration == Registration.OPERATOR:
        return None
    metadata = app.client_metadata or {}
    client_uri = metadata.get("client_uri")
    return {"kind": app.registration,
            "client_id_host": urls.display_host(app.client_id) if app.registration == Registration.DOCUMENT else None,
            "client_uri": client_uri if isinstance(client_uri, str) and client_uri.startswith(("https://", "http://"))
            else None}


def _values(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]
