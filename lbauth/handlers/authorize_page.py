"""GET/POST {auth_url}/oauth/: the authorization page (spec 4.1, contract section 5).

GET validates the request, asks a visitor to sign in, and shows the consent page (or, when the
user's live grant already covers the request, redirects with a code at once). POST is the user's
Approve or Deny, with an XSRF token; the request is validated again from the posted fields.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from lbauth.core import scopes, urls
from lbauth.core.oauth import authorize
from lbauth.core.oauth.authorize import AuthorizationRequest
from lbauth.errors import AccessDenied, AuthorizationRedirect, LbauthError, ValidationFailed
from lbauth.handlers.pages import PageHandler, with_query

_REQUEST_FIELDS = ("client_id", "redirect_uri", "response_type", "state", "scope", "code_challenge",
                   "code_challenge_method")


class AuthorizePage(PageHandler):

    def error_page_status(self, error: LbauthError) -> int:
        """A bad client or redirect URI: an error page with 400, never a redirect (contract 5)."""
        return error.page_status or error.status

    async def get(self) -> None:
        params = {name: [v.decode("utf-8", "replace") for v in values]
                  for name, values in self.request.query_arguments.items()}
        await self.handle(params, decision=None)

    async def post(self) -> None:
        form = self.form()
        decision = form.pop("decision", None)
        if decision not in ("approve", "deny"):
            raise ValidationFailed("decision must be approve or deny")
        params = {name: [value] for name, value in form.items() if name in _REQUEST_FIELDS}
        await self.handle(params, decision)

    async def handle(self, params: dict[str, list[str]], decision: str | None) -> None:
        for name in ("client_id", "redirect_uri"):  # the two that decide whether redirecting is safe
            if len(params.get(name, [])) != 1:
                raise ValidationFailed(f"{name} must be sent exactly once")
        app = await authorize.load_client(self.services.db, params["client_id"][0], params["redirect_uri"][0])
        try:
            await self.decide(authorize.check_front_channel(app, params), decision)
        except AuthorizationRedirect as refusal:  # the redirect URI is known good from here on
            self.send_to_client(refusal.redirect_uri, refusal.params())

    async def decide(self, request: AuthorizationRequest, decision: str | None) -> None:
        """Sign-in, then the user's decision: a code, the consent page, or AuthorizationRedirect."""
        s = self.services
        if self.user is None:
            self.allow_form_to(request.redirect_uri)  # the sign-in may end at the client (contract 5)
            self.login_form(self.request.uri if decision is None else "/oauth/?" + _query(request))
            return
        if decision == "deny":
            raise AuthorizationRedirect(AccessDenied(), request.redirect_uri, request.state)
        # A program on the device listening at an unregistered loopback URI is shown to the user
        # every time: no code goes there without consent (contract 5).
        if decision == "approve" or (not request.unregistered_loopback
                                     and await authorize.grant_covers(s.db, self.user.id, request)):
            code = await authorize.issue_code(s.db, s.clock, request, self.user.id, s.settings.code_ttl)
            self.send_to_client(request.redirect_uri, {"code": code, "state": request.state})
            return
        self.consent_page(request)

    def consent_page(self, request: AuthorizationRequest) -> None:
        self.allow_form_to(request.redirect_uri)
        self.render_page("consent.html", app=request.app, request=request,
                         scopes=[(name, scopes.SCOPES[name]) for name in request.scopes],
                         hidden=_hidden_fields(request), redirect_host=urlsplit(request.redirect_uri).netloc)

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


def _hidden_fields(request: AuthorizationRequest) -> list[tuple[str, str]]:
    fields = [("client_id", request.app.client_id), ("redirect_uri", request.redirect_uri),
              ("response_type", "code"), ("scope", " ".join(request.scopes))]
    if request.state is not None:  # a request without state comes back without one (contract 5)
        fields.append(("state", request.state))
    if request.code_challenge:
        fields += [("code_challenge", request.code_challenge), ("code_challenge_method", "S256")]
    return fields


def _query(request: AuthorizationRequest) -> str:
    return urlencode(_hidden_fields(request))
