"""The user-facing pages (spec 4.1, contract sections 4 and 5): HTML over Jinja templates, a signed
HttpOnly SameSite=Lax session cookie, XSRF tokens on every form, strict security headers."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
import tornado.web

from lbauth.clock import iso
from lbauth.core import urls
from lbauth.core.accounts import links
from lbauth.core.accounts.accounts import NewSession, SecondStepNeeded
from lbauth.core.accounts.links import LinkKind
from lbauth.core.accounts.sessions import BROWSER, SignedIn
from lbauth.errors import BearerTokenError, LbauthError, LoginFailed, MfaFailed, ValidationFailed
from lbauth.handlers.base import BaseHandler
from lbauth.storage.records import App, User

SESSION_COOKIE = "lbauth_session"
# The pending second step of a browser sign-in (its lba_mt_ token): a signed cookie for /login/mfa
# only, never in the page, so no page or error body holds it.
MFA_COOKIE, MFA_COOKIE_PATH = "lbauth_mfa", links.KINDS[LinkKind.MFA].path
PENDING_STEP_SECONDS = links.KINDS[LinkKind.MFA].lifetime
_PACKAGE = Path(__file__).resolve().parent.parent


def resource_dir(name: str) -> Path:
    """templates/ or static/: inside the installed package, or beside it in a source tree."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"lbauth cannot find its {name}/ folder")


class StaticFiles(tornado.web.StaticFileHandler):
    """`/static/`: Tornado's handler, except that a NUL in the path (`%00`), which no file name can
    hold, is a 404 like any other missing file rather than a 500 from `os.path.realpath`."""

    def validate_absolute_path(self, root: str, absolute_path: str) -> str | None:
        if "\x00" in absolute_path:
            raise tornado.web.HTTPError(404)
        return super().validate_absolute_path(root, absolute_path)


@functools.cache
def make_templates() -> jinja2.Environment:
    """The pages' templates, one environment per process: it holds no setting, and each template is
    compiled once (servers started in one process, as the tests do, share them)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(resource_dir("templates")),
                             autoescape=jinja2.select_autoescape(default=True), undefined=jinja2.StrictUndefined)
    env.filters["iso"] = iso  # a stored Unix time as the API writes it
    return env


class PageHandler(BaseHandler):
    """Pages render HTML, errors included, and know the logged-in user from the session cookie."""

    user: User | None = None
    session: SignedIn | None = None  # the browser session of the cookie (contract 16)
    form_targets: tuple[str, ...] = ()  # extra CSP form-action sources (allow_form_to)
    script_src: str | None = None  # pages run no script, except the console's own file
    # LBAUTH_MFA=required (contract 19): may a user without a second factor see this page? Only
    # what sets one up, signing in or out, and the authorization endpoint (whose policy asks).
    open_before_enrolment = False

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Frame-Options", "DENY")
        self.set_header("Referrer-Policy", "no-referrer")
        self._set_csp()

    def _set_csp(self) -> None:
        form_action = " ".join(("'self'", *self.form_targets))
        # A page's own script may call back its own server (fetch), and nowhere else.
        script = f"script-src {self.script_src}; connect-src 'self'; " if self.script_src else ""
        self.set_header("Content-Security-Policy",
                        f"default-src 'none'; {script}style-src 'self'; img-src 'self' https: data:; "
                        f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'")

    async def prepare(self) -> None:
        super().prepare()
        token = self.session_token()
        if token:
            try:
                self.session = await self.services.accounts.sessions.check(token.decode(), kind=BROWSER)
            except BearerTokenError:  # ended (contract 16: a copied cookie stops working), expired, unknown
                self.clear_cookie(SESSION_COOKIE)
                return
            self.user = self.session.user
            if self.get_signed_cookie_key_version(SESSION_COOKIE) != self.settings.get("key_version"):
                self.start_session(token.decode())  # re-sign under the current master key (rotation)
            if (self.services.settings.mfa == "required" and not self.user.mfa
                    and not type(self).open_before_enrolment):
                self.enrol_first(self.request.uri if self.request.method == "GET" else None)

    def enrol_first(self, next_url: str | None) -> None:
        """The security page, to set up a second factor, and then back to `next_url`."""
        target = "/account/security?" + urlencode({"enrol": "required", **({"next": next_url} if next_url else {})})
        self.redirect(target, status=303 if self.request.method == "POST" else 302)

    def session_token(self) -> bytes | None:
        """The session cookie's signed value. Only the current (v2) format, the one that carries a
        key version: Tornado asserts on a v1-looking value when the cookie secret is a dict (a 500)."""
        return self.get_signed_cookie(SESSION_COOKIE, max_age_days=366, min_version=2)

    # ---- rendering -------------------------------------------------------------------------------

    def render_page(self, template: str, status: int = 200, **context: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        page = self.application.settings["templates"].get_template(template)
        self.finish(page.render(static_url=self.static_url("lbauth.css"), xsrf_form_html=self.xsrf_form_html(),
                                user=self.user, **context))

    def render_error(self, error: LbauthError) -> None:
        self.set_default_headers()
        self.render_page("error.html", status=self.error_page_status(error), title=_error_title(error),
                         message=error.message, code=error.sub_code)

    def error_page_status(self, error: LbauthError) -> int:
        return error.status

    # ---- forms -----------------------------------------------------------------------------------

    def form(self, lists: tuple[str, ...] = ()) -> dict[str, Any]:
        """The POSTed form after its XSRF token is checked (Tornado's double-submit cookie)."""
        form = self.form_body(lists)
        self.request.body_arguments = {k: [x.encode() for x in v] if k in lists else [v.encode()]
                                       for k, v in form.items()}
        self.request.arguments = {**self.request.query_arguments, **self.request.body_arguments}
        tornado.web.RequestHandler.check_xsrf_cookie(self)
        return form

    def start_session(self, token: str) -> None:
        secure = urlsplit(self.services.settings.auth_url).scheme == "https"
        self.set_signed_cookie(SESSION_COOKIE, token, expires_days=None, httponly=True, samesite="Lax",
                               secure=secure, max_age=self.services.settings.user_token_ttl)

    def login_form(self, next_url: str, status: int = 200, error: str | None = None, email: str = "",
                   app: App | None = None, passkey_required: bool = False) -> None:
        """`app`: the app the user is signing in for, named on the page. `passkey_required`: only a
        passkey will do (an app asked for `acr_values=phr`). The form runs static/passkeys.js."""
        settings = self.services.settings
        self.script_src = "'self'"
        self._set_csp()
        self.render_page("login.html", status=status, next_url=next_url, error=error, email=email, app=app,
                         signup=settings.signup_open, forgot=settings.mail_enabled, passkey_required=passkey_required)

    def sign_in_next(self) -> str:
        """Where the sign-in form of `@signed_in` comes back to: this page."""
        return self.request.uri or "/"

    # ---- a form whose answer ends at a client (contract 5) ---------------------------------------

    def allow_form_to(self, redirect_uri: str) -> bool:
        """Let this page's form end, through redirects, at `redirect_uri`: its origin, as a CSP
        host-source, joins `form-action` (Chromium checks every hop of the form's redirect chain).
        False when no host-source can name it (a private-use scheme, an IPv6 literal): the form's
        answer must then be `continue_page`, never a redirect to the client."""
        source = urls.form_action_source(redirect_uri)
        if source is None:
            return False
        self.form_targets = (source,)
        self._set_csp()
        return True

    def continue_page(self, target: str, heading: str, message: str) -> None:
        """The answer to a form whose next stop no `form-action` source may name: a page that goes
        on to `target` by a navigation (a refresh, or the link), which `form-action` does not govern."""
        self.render_page("continue.html", target=target, heading=heading, message=message)


PageMethod = Callable[..., Awaitable[None]]


def signed_in(method: PageMethod | None = None, *, lists: tuple[str, ...] = (), next_url: str | None = None,
              status: int = 200) -> Any:
    """A page method for signed-in users only, as Tornado's `@authenticated`, but a visitor gets our
    sign-in form (coming back to `next_url`, or the page's `sign_in_next()`) with `status`. A POST's
    form is read first (`lists` as in `form()`: its XSRF token checked, its errors answered) and
    given to the method as `form`. `@signed_in` or `@signed_in(...)`."""
    def decorate(method: PageMethod) -> PageMethod:
        @functools.wraps(method)
        async def wrapper(self: PageHandler, *args: Any, **kwargs: Any) -> None:
            if self.request.method == "POST":
                kwargs["form"] = self.form(lists)
            if self.user is None:
                self.login_form(next_url or self.sign_in_next(), status=status)
                return
            await method(self, *args, **kwargs)
        return wrapper
    return decorate if method is None else decorate(method)


def _error_title(error: LbauthError) -> str:
    if not error.redirectable:
        return "This app's request cannot be trusted"
    return {400: "Bad request", 401: "Please sign in", 403: "Not allowed", 404: "Not found",
            413: "Too large", 429: "Slow down"}.get(error.status, "Something went wrong")


def safe_next(target: str | None) -> str:
    """Only a path on this server: no scheme, no host, no `//` (an open redirect otherwise)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or "\\" in target:
        return "/account/apps"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else "/account/apps"


class LoginPage(PageHandler):
    """GET/POST {auth_url}/login: email and password, or a passkey, then back to where the user
    was going."""
    script_src = "'self'"  # static/passkeys.js: "Sign in with a passkey" and passkey autofill
    open_before_enrolment = True

    async def get(self) -> None:
        next_url = safe_next(self.get_query_argument("next", None))
        if self.user:
            self.redirect(next_url)
            return
        app = await self.allow_next(next_url)
        self.login_form(next_url, app=app)

    async def post(self) -> None:
        form = self.form()
        next_url = safe_next(form.get("next"))
        self.limit_login(form.get("email", ""))
        s = self.services
        app = await self.allow_next(next_url)
        redirect_allowed = self.allows_redirect
        try:
            result = await s.accounts.sign_in(form.get("email", ""), form.get("password", ""), kind=BROWSER,
                                              source=self.source())
        except (LoginFailed, ValidationFailed) as exc:
            self.login_form(next_url, status=401, error=exc.message, email=form.get("email", "")[:320], app=app)
            return
        if isinstance(result, SecondStepNeeded):  # no session on the password alone (contract 19)
            secure = urlsplit(s.settings.auth_url).scheme == "https"
            self.set_signed_cookie(MFA_COOKIE, result.mfa_token, expires_days=None, httponly=True, samesite="Strict",
                                   secure=secure, max_age=PENDING_STEP_SECONDS, path=MFA_COOKIE_PATH)
            self.render_page("login_mfa.html", next_url=next_url, methods=result.methods, method=None, error=None)
            return
        await self.signed_in_with(result, next_url, redirect_allowed)

    async def signed_in_with(self, session: NewSession, next_url: str, redirect_allowed: bool) -> None:
        s = self.services
        if self.session is not None:  # signing in again (prompt=login, max_age) ends the old browser session
            await s.accounts.sign_out(self.session, self.source())
        self.start_session(session.token)
        if redirect_allowed:
            self.redirect(next_url, status=303)
        else:
            self.continue_page(next_url, "Signed in", "Continue to the app that sent you here.")

    allows_redirect = True  # allow_next: False when a redirect chain cannot reach `next`'s redirect URI

    async def allow_next(self, next_url: str) -> App | None:
        """When `next` is an authorization request of a known client and one of its redirect URIs,
        the sign-in may end at that URI (POST /login, 303 /oauth/, 302 client): allow it in
        `form-action` (`allows_redirect` False when a redirect chain cannot reach that URI: see
        allow_form_to). The app, which the sign-in page names; None for any other `next`."""
        found = await self.services.oauth.authorization_endpoint.client_of(next_url)
        if found is None:
            return None
        app, redirect_uri = found
        self.allows_redirect = self.allow_form_to(redirect_uri)
        return app


class LoginMfaPage(LoginPage):
    """POST {auth_url}/login/mfa: the second step of a browser sign-in (contract 19): the pending
    step's token and a TOTP or recovery code, then the session cookie, as /login does."""

    async def get(self) -> None:
        self.redirect("/login", status=303)

    async def post(self) -> None:
        form = self.form()
        next_url = safe_next(form.get("next"))
        await self.allow_next(next_url)
        redirect_allowed = self.allows_redirect
        cookie = self.get_signed_cookie(MFA_COOKIE, max_age_days=1)
        mfa_token, method = cookie.decode() if cookie else "", form.get("method", "")
        try:
            with self.services.metrics.second_step(method):
                session = await self.services.factors.complete_sign_in(
                    mfa_token, method, form.get("code", ""), kind=BROWSER, source=self.source())
        except (MfaFailed, ValidationFailed) as exc:
            methods = await self.services.factors.pending_methods(mfa_token)
            if methods is None:  # the step is gone (used or expired): sign in again
                self.clear_cookie(MFA_COOKIE, path=MFA_COOKIE_PATH)
                self.login_form(next_url, status=401, error="This sign-in has expired; sign in again.")
                return
            self.render_page("login_mfa.html", status=401, next_url=next_url, methods=methods, method=method,
                             error=exc.message)
            return
        self.clear_cookie(MFA_COOKIE, path=MFA_COOKIE_PATH)
        await self.signed_in_with(session, next_url, redirect_allowed)


class HomePage(PageHandler):
    """GET {auth_url}/: what this server is, and where to go: sign in or your account, the
    developer console, the discovery document."""
    open_before_enrolment = True

    def get(self) -> None:
        self.render_page("home.html", issuer=self.services.settings.issuer)


class LogoutPage(PageHandler):
    """POST {auth_url}/logout: end the session here and server-side (a copy of the cookie stops
    working too, contract 16). GET asks first, on the OpenID end-session page."""
    open_before_enrolment = True

    def get(self) -> None:
        self.redirect("/oauth/logout", status=303)

    async def post(self) -> None:
        form = self.form()
        if self.session is not None:
            await self.services.accounts.sign_out(self.session, self.source())
        self.clear_cookie(SESSION_COOKIE)
        # `next`: where the next sign-in goes (prompt=select_account's "Use another account")
        self.redirect("/login?" + urlencode({"next": safe_next(form["next"])}) if form.get("next") else "/login",
                      status=303)

