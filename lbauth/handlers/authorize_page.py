"""GET/POST {auth_url}/oauth/: the authorization page (spec 4.1, contract section 5).

GET validates the request, asks a visitor to sign in, and shows the consent page (or, when the
user's live grant already covers the request, redirects with a code at once). POST is the user's
Approve or Deny, with an XSRF token; the request is validated again from the posted fields.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from lbauth.core import authorize, scopes
from lbauth.core.authorize import AuthorizationRedirect, AuthorizationRequest
from lbauth.errors import LbauthError, ValidationFailed
from lbauth.handlers.pages import PageHandler, with_query

_REQUEST_FIELDS = ("client_id", "redirect_uri", "response_type", "state", "scope", "code_challenge",
                   "code_challenge_method")


class AuthorizePage(PageHandler):

    def render_error(self, error: LbauthError) -> None:
        """A bad client or redirect URI: an error page with 400, never a redirect (contract 5)."""
        if error.sub_code in ("oauth2.application.not_found", "oauth2.redirect_uri.mismatch"):
            self.set_status(400)
            error.status = 400
        super().render_error(error)

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
        s = self.services
        app = await authorize.load_client(s.db, params["client_id"][0], params["redirect_uri"][0])
        try:
            request = authorize.check_front_channel(app, params)
        except AuthorizationRedirect as refusal:
            self.send_to_client(refusal.redirect_uri, {"error": refusal.error,
                                                       "error_description": refusal.description,
                                                       "state": refusal.state})
            return
        if self.user is None:
            self.login_form(self.request.uri if decision is None else "/oauth/?" + _query(request))
            return
        if decision == "deny":
            self.send_to_client(request.redirect_uri, {"error": "access_denied",
                                                       "error_description": "The user denied the request.",
                                                       "state": request.state})
            return
        if decision == "approve" or await authorize.grant_covers(s.db, self.user.id, request):
            code = await authorize.issue_code(s.db, s.clock, request, self.user.id, s.settings.code_ttl)
            self.send_to_client(request.redirect_uri, {"code": code, "state": request.state})
            return
        self.consent_page(request)

    def consent_page(self, request: AuthorizationRequest) -> None:
        self.form_targets = (_origin(request.redirect_uri),)
        self._set_csp()
        self.render_page("consent.html", app=request.app, request=request,
                         scopes=[(name, scopes.SCOPES[name]) for name in request.scopes],
                         hidden=_hidden_fields(request), redirect_host=urlsplit(request.redirect_uri).netloc)

    def send_to_client(self, redirect_uri: str, params: dict[str, str | None]) -> None:
        """302 after a GET, 303 after a POST: never 307, which would re-POST the form (RFC 9700 4.11)."""
        self.redirect(with_query(redirect_uri, params), status=303 if self.request.method == "POST" else 302)


def _hidden_fields(request: AuthorizationRequest) -> list[tuple[str, str]]:
    fields = [("client_id", request.app.client_id), ("redirect_uri", request.redirect_uri),
              ("response_type", "code"), ("state", request.state or ""), ("scope", " ".join(request.scopes))]
    if request.code_challenge:
        fields += [("code_challenge", request.code_challenge), ("code_challenge_method", "S256")]
    return fields


def _query(request: AuthorizationRequest) -> str:
    return urlencode(_hidden_fields(request))


def _origin(uri: str) -> str:
    """The CSP source that lets the consent form's redirect reach the client (form-action)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{parts.scheme}:"
