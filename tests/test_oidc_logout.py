"""RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0; contract 15) at {auth_url}/oauth/logout,
GET and POST, on both databases: id_token_hint checked (signature and iss; expired accepted), client_id
against the hint's aud, the browser session ended (after a confirmation unless the hint names it), and
the redirect to a registered post-logout URI only, with state."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from lbauth.handlers.operator_json import app_json
from tests.flow_helpers import (
    REGISTERED_URI,
    PageSession,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
)
from tests.support import unverified_claims

LOGOUT_URI = "https://app.example/signed-out"
OTHER_LOGOUT_URI = "https://other.example/bye"


async def _setup(server):
    return await full_setup(server, post_logout_redirect_uris=[LOGOUT_URI, "https://app.example/bye?x=1"])


async def _browser_sign_in(server, setup) -> tuple[PageSession, str]:
    """A browser signs in through an OpenID authorization request; the ID token its code gives (whose
    `sid` is this browser session)."""
    browser = PageSession(server)
    params = front_params(setup.client_id, REGISTERED_URI, scope="openid profile", nonce="n-1")
    page = await browser.open_logged_in(oauth_url(params), setup.user["email"], setup.user["password"])
    if page.consent_form() is not None:
        page = await browser.decide(page, "approve")
    assert page.status in (302, 303), page.text[:300]
    code = redirect_query(page.location, REGISTERED_URI)["code"][0]
    r = await exchange(server, code, REGISTERED_URI, setup.client_id, setup.client_secret)
    assert r.status == 200, r.text
    return browser, r.data["idToken"]


async def _signed_in(browser: PageSession) -> bool:
    page = await browser.get("/account/apps")
    return page.status == 200 and page.login_form() is None


def _logout_url(**params: str) -> str:
    return "/oauth/logout?" + urlencode(params)


def _form_action(page) -> str:
    csp = page.response.headers["Content-Security-Policy"]
    return next(d for d in csp.split(";") if d.strip().startswith("form-action")).strip()


# ---- the hint names this session: no question, straight back to the app ------------------------------

async def test_build_end_session_url_shape_ends_the_session_and_redirects_with_state(server):
    """openid-client's buildEndSessionUrl: ?id_token_hint=...&post_logout_redirect_uri=...&state=..."""
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    cookie_copy = dict(browser.cookies)
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI,
                                         state="s t/ä"))
    assert page.status == 302
    assert redirect_query(page.location, LOGOUT_URI) == {"state": ["s t/ä"]}
    assert not await _signed_in(browser)
    # Ended on the server: a copy of the old cookie is refused too (contract 16).
    thief = PageSession(server)
    thief.cookies = cookie_copy
    assert not await _signed_in(thief)


async def test_build_end_session_url_with_client_id(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI,
                                         state="xyz", client_id=setup.client_id))
    assert page.status == 302 and page.location == f"{LOGOUT_URI}?state=xyz"
    assert not await _signed_in(browser)


async def test_a_relying_partys_form_post_needs_no_xsrf_and_gets_303(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    page = await browser.request("POST", "/oauth/logout", form={
        "id_token_hint": id_token, "post_logout_redirect_uri": "https://app.example/bye?x=1", "state": "p",
        "logout_hint": "whoever", "ui_locales": "fr"})
    assert page.status == 303
    assert redirect_query(page.location, "https://app.example/bye") == {"x": ["1"], "state": ["p"]}
    assert not await _signed_in(browser)


async def test_without_state_the_redirect_carries_none(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI))
    assert page.status == 302 and page.location == LOGOUT_URI


async def test_an_expired_hint_is_accepted(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    server.clock.advance(server.settings.id_token_ttl * 10)
    assert unverified_claims(id_token)["exp"] < server.clock.now()
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI, state="e"))
    assert page.status == 302 and page.location == f"{LOGOUT_URI}?state=e"
    assert not await _signed_in(browser)


async def test_the_hint_alone_names_the_app(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI))
    assert page.status == 302 and page.location == LOGOUT_URI


# ---- asking first ----------------------------------------------------------------------------------------

async def test_without_a_hint_a_signed_in_user_is_asked_first(server):
    setup = await _setup(server)
    browser, _ = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(client_id=setup.client_id, post_logout_redirect_uri=LOGOUT_URI,
                                         state="c1"))
    assert page.status == 200 and "Sign out" in page.text and "Test App" in page.text
    assert await _signed_in(browser)  # nothing ended yet
    # The confirmation's form may end at the app: its origin, and no wildcard, in form-action (contract 5).
    assert _form_action(page) == "form-action 'self' https://app.example"
    (form,) = [f for f in page.forms if f.action == "/oauth/logout"]
    assert form.has_input("_xsrf") and "id_token_hint" not in form.hidden()
    # Without the XSRF token nothing happens.
    refused = await browser.submit(page, form, drop=("_xsrf",))
    assert refused.status == 403 and await _signed_in(browser)
    done = await browser.submit(page, form)
    assert done.status == 303 and done.location == f"{LOGOUT_URI}?state=c1"
    assert not await _signed_in(browser)


async def test_a_hint_of_another_session_is_asked_first(server):
    setup = await _setup(server)
    _, other_token = await _browser_sign_in(server, setup)  # the same user, in another browser
    browser, _ = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(id_token_hint=other_token, post_logout_redirect_uri=LOGOUT_URI))
    assert page.status == 200 and any(f.action == "/oauth/logout" for f in page.forms)
    assert await _signed_in(browser)
    done = await browser.submit(page, next(f for f in page.forms if f.action == "/oauth/logout"))
    assert done.status == 303 and done.location == LOGOUT_URI
    assert not await _signed_in(browser)


async def test_a_cross_site_post_without_a_hint_is_only_a_question(server):
    setup = await _setup(server)
    browser, _ = await _browser_sign_in(server, setup)
    page = await browser.request("POST", "/oauth/logout", form={"client_id": setup.client_id})
    assert page.status == 200 and await _signed_in(browser)


async def test_an_unregistered_uri_after_confirmation_gives_the_signed_out_page(server):
    setup = await _setup(server)
    browser, _ = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(client_id=setup.client_id, post_logout_redirect_uri="https://evil.example/"))
    assert page.status == 200 and "evil.example" not in page.response.headers["Content-Security-Policy"]
    done = await browser.submit(page, next(f for f in page.forms if f.action == "/oauth/logout"))
    assert done.status == 200 and "signed out" in done.text.lower() and done.location is None
    assert not await _signed_in(browser)


# ---- the redirect only to a URI registered for that app, exactly -----------------------------------------

@pytest.mark.parametrize("uri", [
    "https://app.example/signed-out/", "https://APP.example/signed-out", "https://app.example/signed-out?x=1",
    "https://app.example/signed", "https://app.example/bye", REGISTERED_URI, "https://evil.example/signed-out",
    OTHER_LOGOUT_URI,
])
async def test_only_an_exactly_registered_uri_is_a_redirect(server, uri):
    setup = await _setup(server)
    other = await server.create_app(setup.user["email"], post_logout_redirect_uris=[OTHER_LOGOUT_URI])
    shown = app_json(await server.services.apps.get(other["clientId"]))
    assert shown["postLogoutRedirectUris"] == [OTHER_LOGOUT_URI]  # another app's URI is not this app's
    browser, id_token = await _browser_sign_in(server, setup)
    page = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=uri, state="s"))
    assert page.status == 200 and page.location is None
    assert "signed out" in page.text.lower()
    assert not await _signed_in(browser)  # the session ends all the same


async def test_an_unknown_app_gives_the_signed_out_page(server):
    browser = PageSession(server)
    page = await browser.get(_logout_url(client_id="cid_nobody", post_logout_redirect_uri=LOGOUT_URI, state="s"))
    assert page.status == 200 and page.location is None and "signed out" in page.text.lower()


async def test_a_uri_without_an_app_gives_the_signed_out_page(server):
    await _setup(server)
    page = await PageSession(server).get(_logout_url(post_logout_redirect_uri=LOGOUT_URI))
    assert page.status == 200 and page.location is None


# ---- nobody signed in ------------------------------------------------------------------------------------

async def test_not_signed_in_goes_straight_back_to_a_registered_uri(server):
    setup = await _setup(server)
    browser = PageSession(server)
    page = await browser.get(_logout_url(client_id=setup.client_id, post_logout_redirect_uri=LOGOUT_URI,
                                         state="n"))
    assert page.status == 302 and page.location == f"{LOGOUT_URI}?state=n"
    posted = await browser.request("POST", "/oauth/logout", form={"client_id": setup.client_id,
                                                                   "post_logout_redirect_uri": LOGOUT_URI})
    assert posted.status == 303 and posted.location == LOGOUT_URI


async def test_not_signed_in_with_nothing_gives_the_signed_out_page(server):
    page = await PageSession(server).get("/oauth/logout")
    assert page.status == 200 and "signed out" in page.text.lower()
    assert page.response.headers["X-Frame-Options"] == "DENY"


async def test_a_signed_out_browser_with_an_old_hint_goes_back(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    first = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI))
    assert first.status == 302
    again = await browser.get(_logout_url(id_token_hint=id_token, post_logout_redirect_uri=LOGOUT_URI, state="2"))
    assert again.status == 302 and again.location == f"{LOGOUT_URI}?state=2"


# ---- refused: an error page, 400, no redirect, nothing ended ---------------------------------------------

async def test_client_id_other_than_the_hints_audience_is_refused(server):
    setup = await _setup(server)
    other = await server.create_app(setup.user["email"], post_logout_redirect_uris=[OTHER_LOGOUT_URI])
    browser, id_token = await _browser_sign_in(server, setup)
    for method in ("GET", "POST"):
        params = {"id_token_hint": id_token, "client_id": other["clientId"],
                  "post_logout_redirect_uri": OTHER_LOGOUT_URI, "state": "s"}
        page = (await browser.get(_logout_url(**params)) if method == "GET"
                else await browser.request("POST", "/oauth/logout", form=params))
        assert page.status == 400 and page.location is None, method
        assert await _signed_in(browser)


def _forged(server, setup, **changes) -> str:
    claims = {"iss": server.settings.issuer, "sub": "asu_x", "aud": setup.client_id, "iat": 1, "exp": 2,
              **changes}
    signer = server.services.keyring.signers["RS256"]
    return jwt.encode(claims, signer.private_key, algorithm="RS256", headers={"kid": signer.kid})


async def test_a_bad_hint_is_refused(server):
    setup = await _setup(server)
    browser, id_token = await _browser_sign_in(server, setup)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    kid = server.services.keyring.signers["RS256"].kid
    header, payload, signature = id_token.split(".")
    hints = {
        "garbage": "not-a-token",
        "wrong issuer": _forged(server, setup, iss="https://evil.example"),
        "another key": jwt.encode({"iss": server.settings.issuer, "sub": "asu_x", "aud": setup.client_id},
                                  stranger, algorithm="RS256", headers={"kid": kid}),
        "altered": f"{header}.{payload[:-2]}AA.{signature}",
        "unsigned": jwt.encode({"iss": server.settings.issuer, "sub": "x", "aud": setup.client_id}, None,
                               algorithm="none", headers={"kid": kid}),
    }
    for name, hint in hints.items():
        page = await browser.get(_logout_url(id_token_hint=hint, post_logout_redirect_uri=LOGOUT_URI, state="s"))
        assert page.status == 400 and page.location is None, name
        assert await _signed_in(browser), name
    # Signed by the server with the right issuer: good, expired or not.
    page = await browser.get(_logout_url(id_token_hint=_forged(server, setup), post_logout_redirect_uri=LOGOUT_URI))
    assert page.status == 200  # a hint without sid: asked first


async def test_a_repeated_parameter_is_refused(server):
    setup = await _setup(server)
    page = await PageSession(server).get("/oauth/logout?" + urlencode(
        [("client_id", setup.client_id), ("post_logout_redirect_uri", LOGOUT_URI),
         ("post_logout_redirect_uri", OTHER_LOGOUT_URI)]))
    assert page.status == 400 and page.location is None


async def test_metadata_names_the_endpoint(server):
    meta = (await server.client.get("/.well-known/openid-configuration")).json
    assert urlsplit(meta["end_session_endpoint"]).path == "/oauth/logout"
    assert meta["end_session_endpoint"] == f"{server.settings.auth_url}/oauth/logout"
