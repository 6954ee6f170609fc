"""The user-facing pages (spec 4.1, contract sections 4 and 5): HTML over Jinja templates, a signed
HttpOnly SameSite=Lax session cookie, XSRF tokens on every form, strict security headers."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
import tornado.web
from sqlalchemy import Row

from lbauth.core import users
from lbauth.errors import LbauthError, LoginFailed, TokenInvalid, ValidationFailed
from lbauth.handlers.base import BaseHandler

SESSION_COOKIE = "lbauth_session"
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


def make_templates() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(resource_dir("templates")),
                              autoescape=jinja2.select_autoescape(default=True), undefined=jinja2.StrictUndefined)


class PageHandler(BaseHandler):
    """Pages render HTML, errors included, and know the logged-in user from the session cookie."""

    user: Row | None = None
    form_targets: tuple[str, ...] = ()  # extra CSP form-action sources (a consent redirect target)
    script_src: str | None = None  # pages run no script, except the console's own file

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Frame-Options", "DENY")
        self.set_header("Referrer-Policy", "no-referrer")
        self._set_csp()

    def _set_csp(self) -> None:
        form_action = " ".join(("'self'", *self.form_targets))
        script = f"script-src {self.script_src}; " if self.script_src else ""
        self.set_header("Content-Security-Policy",
                        f"default-src 'none'; {script}style-src 'self'; img-src 'self' https: data:; "
                        f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'")

    async def prepare(self) -> None:
        super().prepare()
        token = self.session_token()
        if token:
            try:
                self.user = await users.user_for_token(self.services.db, self.services.clock, token.decode())
            except TokenInvalid:
                self.clear_cookie(SESSION_COOKIE)
                return
            if self.get_signed_cookie_key_version(SESSION_COOKIE) != self.settings.get("key_version"):
                self.start_session(token.decode())  # re-sign under the current master key (rotation)

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
        self.render_page("error.html", status=error.status, title=_error_title(error), message=error.message)

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

    def login_form(self, next_url: str, status: int = 200, error: str | None = None, email: str = "") -> None:
        self.render_page("login.html", status=status, next_url=next_url, error=error, email=email)


def _error_title(error: LbauthError) -> str:
    if error.sub_code in ("oauth2.application.not_found", "oauth2.redirect_uri.mismatch"):
        return "This app's request cannot be trusted"
    return {400: "Bad request", 401: "Please sign in", 403: "Not allowed", 404: "Not found",
            413: "Too large", 429: "Slow down"}.get(error.status, "Something went wrong")


def safe_next(target: str | None) -> str:
    """Only a path on this server: no scheme, no host, no `//` (an open redirect otherwise)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or "\\" in target:
        return "/account/apps"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else "/account/apps"


def with_query(url: str, params: dict[str, str | None]) -> str:
    """Append parameters to a redirect URI that may already carry a query (RFC 6749 3.1.2)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{url}{'&' if urlsplit(url).query else ('' if url.endswith('?') else '?')}{query}"


class LoginPage(PageHandler):
    """GET/POST {auth_url}/login: email and password, then back to where the user was going."""

    def get(self) -> None:
        next_url = safe_next(self.get_query_argument("next", None))
        if self.user:
            self.redirect(next_url)
            return
        self.login_form(next_url)

    async def post(self) -> None:
        form = self.form()
        next_url = safe_next(form.get("next"))
        self.limit_login(form.get("email", ""))
        s = self.services
        try:
            session = await users.login(s.db, s.clock, s.settings.user_token_ttl, form.get("email", ""),
                                        form.get("password", ""))
        except (LoginFailed, ValidationFailed) as exc:
            self.login_form(next_url, status=401, error=exc.message, email=form.get("email", "")[:320])
            return
        self.start_session(session.token)
        self.redirect(next_url, status=303)


class LogoutPage(PageHandler):
    """POST {auth_url}/logout: end the session here and server-side."""

    async def post(self) -> None:
        self.form()
        token = self.session_token()
        if token:
            await users.logout(self.services.db, self.services.clock, token.decode())
        self.clear_cookie(SESSION_COOKIE)
        self.redirect("/login", status=303)

