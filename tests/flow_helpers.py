"""Helpers for the authorization flow tests: the server-side authorize call, the two token grants,
PKCE values (RFC 7636), and a small browser (`PageSession`) for the front channel `GET /oauth/`.

Only HTTP is used: the tests see the server as a client or a browser would.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

from tests.client import Client, Response

REGISTERED_URI = "https://app.example/callback"
REDIRECT_STATUSES = (301, 302, 303, 307, 308)


# ---- server-side authorization and the token endpoints (spec 4.2 to 4.4) -----------------------------

async def authorize(server: Any, user_token: str | None, client_id: str, redirect_uri: str,
                    scope: Sequence[str] = ("userinfo",), state: str | None = "st-123",
                    **extra_json: Any) -> Response:
    """POST /api/oauth/authorize/external as the user `user_token` (None: no Authorization header)."""
    document: dict[str, Any] = {"clientId": client_id, "redirectUri": redirect_uri, "scope": list(scope)}
    if state is not None:
        document["state"] = state
    document.update(extra_json)
    return await server.client.post("/api/oauth/authorize/external", json=document, bearer=user_token)


def _form(fields: dict[str, Any]) -> dict[str, Any]:
    """A form without the fields set to None (so a test can leave one out)."""
    return {name: value for name, value in fields.items() if value is not None}


async def exchange(server: Any, code: str, redirect_uri: str, client_id: str, client_secret: str,
                   **extra_form: Any) -> Response:
    """POST /api/oauth/token/code, form-encoded; `extra_form` adds or overrides fields (None drops one)."""
    fields = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
              "client_id": client_id, "client_secret": client_secret, **extra_form}
    return await server.client.post("/api/oauth/token/code", form=_form(fields))


async def refresh(server: Any, refresh_token: str, client_id: str, client_secret: str,
                  **extra_form: Any) -> Response:
    """POST /api/oauth/token/refresh, form-encoded; `extra_form` adds or overrides fields."""
    fields = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id,
              "client_secret": client_secret, **extra_form}
    return await server.client.post("/api/oauth/token/refresh", form=_form(fields))


@dataclass
class Setup:
    """A user with a live user token and an app they own."""
    user: dict
    token: str
    app: dict

    @property
    def client_id(self) -> str:
        return self.app["clientId"]

    @property
    def client_secret(self) -> str:
        return self.app["clientSecret"]

    @property
    def redirect_uri(self) -> str:
        return self.app["redirectUris"][0]


async def full_setup(server: Any, **app_options: Any) -> Setup:
    """A new user, logged in through the API, and a new app owned by them."""
    app_options.setdefault("redirect_uris", [REGISTERED_URI])
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    app = await server.create_app(user["email"], **app_options)
    return Setup(user=user, token=token, app=app)


async def code_for(server: Any, setup: Setup, scope: Sequence[str] = ("userinfo",),
                   redirect_uri: str | None = None, **extra_json: Any) -> str:
    """An authorization code for the setup's user and app, obtained through authorize/external."""
    r = await authorize(server, setup.token, setup.client_id, redirect_uri or setup.redirect_uri, scope,
                        **extra_json)
    assert r.status == 200, r.text
    return r.data["code"]


async def tokens_for(server: Any, setup: Setup, scope: Sequence[str] = ("userinfo",)) -> dict:
    """A token set (the `data` of a code exchange) for the setup's user and app."""
    code = await code_for(server, setup, scope)
    r = await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)
    assert r.status == 200, r.text
    return r.data


# ---- PKCE (RFC 7636) ----------------------------------------------------------------------------------

def b64url(raw: bytes) -> str:
    """base64url without padding (RFC 7636 appendix A)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def s256_challenge(verifier: str) -> str:
    """code_challenge = BASE64URL(SHA256(ASCII(code_verifier))) (RFC 7636 4.2)."""
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


def pkce_pair() -> tuple[str, str]:
    """A fresh (code_verifier, S256 code_challenge): 32 random octets give a 43-character verifier."""
    verifier = b64url(secrets.token_bytes(32))
    return verifier, s256_challenge(verifier)


# ---- the front channel: a small browser -----------------------------------------------------------------

@dataclass
class Form:
    action: str | None
    method: str
    inputs: list[dict[str, str]] = field(default_factory=list)  # <input>, with its attributes
    buttons: list[dict[str, str]] = field(default_factory=list)  # <button> and submit <input>

    def has_input(self, name: str) -> bool:
        return any(i.get("name") == name for i in self.inputs)

    def submit_values(self, name: str) -> set[str]:
        return {b.get("value", "") for b in self.buttons if b.get("name") == name}

    def hidden(self) -> dict[str, str]:
        return {i["name"]: i.get("value", "") for i in self.inputs
                if i.get("type", "text").lower() == "hidden" and i.get("name")}


class _PageParser(HTMLParser):
    """The forms of a page and its visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.text_parts: list[str] = []
        self._current: Form | None = None
        self._skip = 0  # inside <script> or <style>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v if v is not None else "") for k, v in attrs}
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "form":
            self._current = Form(action=a.get("action"), method=(a.get("method") or "get").lower())
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None:
            kind = a.get("type", "text").lower()
            if kind in ("submit", "image"):
                self._current.buttons.append(a)
            else:
                self._current.inputs.append(a)
        elif tag == "button" and self._current is not None:
            if a.get("type", "submit").lower() == "submit":
                self._current.buttons.append(a)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag == "form":
            self._current = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text_parts.append(data)


@dataclass
class Page:
    """A fetched page: the response, the URL it came from, its forms and visible text."""
    url: str
    response: Response
    forms: list[Form]
    text: str

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def location(self) -> str | None:
        return self.response.headers.get("Location")

    def login_form(self) -> Form | None:
        """The form with a `password` field."""
        return next((f for f in self.forms if f.has_input("password")), None)

    def consent_form(self) -> Form | None:
        """The form whose submit buttons are named `decision`, valued `approve` and `deny`."""
        return next((f for f in self.forms if {"approve", "deny"} <= f.submit_values("decision")), None)


def parse_page(url: str, response: Response) -> Page:
    parser = _PageParser()
    content_type = response.headers.get("Content-Type", "")
    if "html" in content_type or response.body.lstrip()[:1] == b"<":
        parser.feed(response.text)
        parser.close()
    text = " ".join(" ".join(parser.text_parts).split())
    return Page(url=url, response=response, forms=parser.forms, text=text)


def _expired(max_age: str, expires: str) -> bool:
    """A cookie a browser would drop at once: Max-Age <= 0, or Expires in the past (wall time)."""
    if max_age:
        try:
            return int(max_age) <= 0
        except ValueError:
            return False
    if expires:
        try:
            return parsedate_to_datetime(expires).timestamp() <= time.time()
        except (TypeError, ValueError):
            return False
    return False


@dataclass
class _Cookie:
    value: str
    path: str


class PageSession:
    """A browser-like session against the server: keeps cookies, reads forms, posts them.

    Redirects are not followed unless asked (`follow`), and then only while they stay on the server,
    so a redirect to an app's redirect URI is what the caller gets back.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.base = server.url
        self.client: Client = server.client
        self.cookies: dict[str, _Cookie] = {}

    # cookies ---------------------------------------------------------------------------------------------

    def _store_cookies(self, response: Response) -> None:
        for header in response.headers.get_list("Set-Cookie"):
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(header)
            except CookieError:
                continue
            for name, morsel in jar.items():
                if morsel.value == "" or _expired(morsel["max-age"], morsel["expires"]):
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = _Cookie(morsel.value, morsel["path"] or "/")

    def _cookie_header(self, url: str) -> str | None:
        path = urlsplit(url).path or "/"
        pairs = [f"{name}={c.value}" for name, c in self.cookies.items() if path.startswith(c.path)]
        return "; ".join(pairs) or None

    # requests --------------------------------------------------------------------------------------------

    def absolute(self, url: str, base: str | None = None) -> str:
        return urljoin(base or self.base + "/", url)

    def is_on_server(self, url: str) -> bool:
        here, there = urlsplit(self.base), urlsplit(url)
        return (there.scheme, there.netloc) == (here.scheme, here.netloc)

    async def request(self, method: str, url: str, *, form: Any = None, headers: dict | None = None) -> Page:
        url = self.absolute(url)
        headers = dict(headers or {})
        cookie = self._cookie_header(url)
        if cookie:
            headers["Cookie"] = cookie
        response = await self.client.request(method, url, form=form, headers=headers)
        self._store_cookies(response)
        return parse_page(url, response)

    async def get(self, url: str) -> Page:
        return await self.request("GET", url)

    async def follow(self, page: Page, limit: int = 5) -> Page:
        """Follow redirects (as a browser: GET) while they point to the server itself."""
        for _ in range(limit):
            if page.status not in REDIRECT_STATUSES or not page.location:
                return page
            target = self.absolute(page.location, page.url)
            if not self.is_on_server(target):
                return page
            page = await self.get(target)
        raise AssertionError(f"more than {limit} redirects from {page.url}")

    async def submit(self, page: Page, form: Form, fields: dict[str, str] | None = None,
                     *, drop: Iterable[str] = ()) -> Page:
        """POST `form` as a browser would: its hidden inputs (the `_xsrf` token among them), then
        `fields`; the names in `drop` are left out."""
        values = {**form.hidden(), **(fields or {})}
        for name in drop:
            values.pop(name, None)
        action = self.absolute(form.action, page.url) if form.action else page.url
        assert form.method == "post", f"form method is {form.method!r}"
        return await self.request("POST", action, form=values)

    # the flow --------------------------------------------------------------------------------------------

    async def log_in(self, page: Page, email: str, password: str) -> Page:
        """Fill in the login form of `page`, and follow the redirects back to the server's next page."""
        form = page.login_form()
        assert form is not None, f"no login form on {page.url}: {page.text[:300]}"
        return await self.follow(await self.submit(page, form, {"email": email, "password": password}))

    async def open_logged_in(self, url: str, email: str, password: str) -> Page:
        """GET `url`; log in if a login form is shown; the page after that (consent, redirect, ...)."""
        page = await self.follow(await self.get(url))
        if page.status == 200 and page.login_form() is not None:
            page = await self.log_in(page, email, password)
        return page

    async def decide(self, page: Page, decision: str, *, drop: Iterable[str] = ()) -> Page:
        """Press Approve or Deny on the consent page; same-server redirects are followed."""
        form = page.consent_form()
        assert form is not None, f"no consent form on {page.url}: {page.text[:300]}"
        return await self.follow(await self.submit(page, form, {"decision": decision}, drop=drop))


def oauth_url(params: dict[str, str] | Sequence[tuple[str, str]]) -> str:
    """`/oauth/?...` with the parameters URL-encoded (a list of pairs may repeat a name)."""
    return "/oauth/?" + urlencode(params)


def front_params(client_id: str, redirect_uri: str, state: str = "st-front", scope: str | None = "userinfo",
                 response_type: str = "code", **extra: str) -> dict[str, str]:
    params = {"client_id": client_id, "redirect_uri": redirect_uri, "response_type": response_type,
              "state": state}
    if scope is not None:
        params["scope"] = scope
    params.update(extra)
    return params


def redirect_query(location: str, redirect_uri: str) -> dict[str, list[str]]:
    """The query of a redirect to `redirect_uri`, as name -> values; asserts it goes to that URI."""
    target = urlsplit(location)
    expected = urlsplit(redirect_uri)
    assert (target.scheme, target.netloc, target.path) == (expected.scheme, expected.netloc, expected.path), \
        (location, redirect_uri)
    assert not target.fragment, location
    values: dict[str, list[str]] = {}
    for name, value in parse_qsl(target.query, keep_blank_values=True, strict_parsing=True):
        values.setdefault(name, []).append(value)
    return values
