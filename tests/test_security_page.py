"""The second-factors page {auth_url}/account/security, over HTTP with a cookie-keeping browser
(tests/flow_helpers), on both databases: setting up an authenticator app with a code from Debian's
`oathtool`, the recovery codes shown once, removal and new codes only after a recent sign-in, XSRF
on every form, the pages' headers.

Assumed markup (not fixed by the contract): the forms post to the paths below; the secret is
`#totp-secret`, the recovery codes the `<code>` items of `#recovery-codes`, the app's state
`#totp-status` (On / Off)."""

from __future__ import annotations

import html
import re

from tests.flow_helpers import Page, PageSession
from tests.test_account_pages import assert_error_page, field_error, form_to, has_form_to, notice
from tests.test_connected_apps import assert_page_headers
from tests.test_second_factors import oathtool, requires_oathtool

pytestmark = requires_oathtool

SECURITY, ACCOUNT = "/account/security", "/account/"
TOTP_FORM, CONFIRM_FORM = "/account/security/totp", "/account/security/totp/confirm"
REMOVE_FORM, CODES_FORM = "/account/security/totp/remove", "/account/security/recovery-codes"


# ---- helpers -------------------------------------------------------------------------------------------

async def signed_in(server) -> tuple[dict, str, PageSession, Page]:
    """A user with a user token (taken before any second factor), signed in on the security page."""
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    browser = PageSession(server)
    first = await browser.get(SECURITY)
    assert first.status == 200 and first.login_form() is not None, (first.status, first.text[:300])
    page = await browser.log_in(first, user["email"], user["password"])
    assert page.status == 200 and page.url.endswith(SECURITY), (page.status, page.url, page.text[:300])
    return user, token, browser, page


def secret_on(page: Page) -> str:
    match = re.search(r'<code[^>]*\bid="totp-secret"[^>]*>(.*?)</code>', page.response.text, re.S)
    assert match is not None, page.text[:600]
    return html.unescape(match.group(1)).strip()


def codes_on(page: Page) -> list[str]:
    match = re.search(r'<ul[^>]*\bid="recovery-codes"[^>]*>(.*?)</ul>', page.response.text, re.S)
    if match is None:
        return []
    return [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", match.group(1))]


def totp_status(page: Page) -> str:
    match = re.search(r'\bid="totp-status"[^>]*>(.*?)<', page.response.text)
    assert match is not None, page.text[:600]
    return match.group(1).strip()


def wrong_code(right: str) -> str:
    return "000000" if right != "000000" else "111111"


async def start_enrolment(browser: PageSession, page: Page) -> tuple[Page, str]:
    shown = await browser.submit(page, form_to(page, TOTP_FORM))
    assert shown.status == 200, (shown.status, shown.text[:300])
    grouped = secret_on(shown)
    return shown, grouped.replace(" ", "")


async def enrol(server, browser: PageSession, page: Page) -> tuple[Page, str, list[str]]:
    """Set up the app through the page; the page with the recovery codes, the secret, the codes."""
    shown, secret = await start_enrolment(browser, page)
    done = await browser.submit(shown, form_to(shown, CONFIRM_FORM), {"code": oathtool(secret, server.clock.now())})
    assert done.status == 200, (done.status, done.text[:300])
    server.clock.advance(30)  # the next code is another time step's
    return done, secret, codes_on(done)


async def security_api(server, token: str) -> dict:
    r = await server.client.get("/api/account/security", bearer=token)
    assert r.status == 200, r.text
    return r.data


# ---- enrolment -----------------------------------------------------------------------------------------

async def test_the_account_page_links_to_the_security_page_and_back(server):
    _, _, browser, page = await signed_in(server)
    assert_page_headers(page)
    assert 'href="/account/"' in page.response.text
    account = await browser.get(ACCOUNT)
    assert 'href="/account/security"' in account.response.text
    assert totp_status(page) == "Off"
    assert "Passkeys" in page.text and "You have no passkeys" in page.text
    assert re.search(r'\bid="passkeys"[^>]*>\s*</ul>', page.response.text), "the passkey list is not empty"


async def test_an_authenticator_app_is_set_up_through_the_page_and_its_codes_are_shown_once(server):
    user, token, browser, page = await signed_in(server)
    shown, secret = await start_enrolment(browser, page)
    assert_page_headers(shown)
    assert re.fullmatch(r"([A-Z2-7]{4} )+[A-Z2-7]{1,4}", secret_on(shown)), secret_on(shown)
    assert re.search(r"<svg\b[^>]*>.*</svg>", shown.response.text, re.S), "no inline QR code"
    field = re.search(r'<input[^>]*\bid="code"[^>]*>', shown.response.text)
    assert field is not None and 'autocomplete="one-time-code"' in field.group(0) and \
        'inputmode="numeric"' in field.group(0) and 'name="code"' in field.group(0), field
    assert '<label for="code">' in shown.response.text
    assert (await security_api(server, token))["totp"] is False

    # a wrong code: the form again, with the error beside the field
    right = oathtool(secret, server.clock.now())
    refused = await browser.submit(shown, form_to(shown, CONFIRM_FORM), {"code": wrong_code(right)})
    assert refused.status == 401, (refused.status, refused.text[:300])
    assert field_error(refused, "code"), refused.text[:600]
    assert has_form_to(refused, CONFIRM_FORM)
    assert (await security_api(server, token))["totp"] is False

    # the right code: ten recovery codes, this once
    done = await browser.submit(refused, form_to(refused, CONFIRM_FORM), {"code": right})
    assert done.status == 200, (done.status, done.text[:300])
    codes = codes_on(done)
    assert len(codes) == 10 and len(set(codes)) == 10, codes
    assert "only time" in done.text and "Store these codes" in done.text
    assert totp_status(done) == "On"
    assert await security_api(server, token) == {"passkeys": [], "totp": True, "recoveryCodesLeft": 10}

    again = await browser.get(SECURITY)
    assert again.status == 200 and totp_status(again) == "On"
    assert codes_on(again) == [] and not any(code in again.response.text for code in codes)
    assert has_form_to(again, REMOVE_FORM) and has_form_to(again, CODES_FORM) and not has_form_to(again, TOTP_FORM)

    # the codes shown are real: one finishes a sign-in
    r = await server.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]})
    assert r.data["mfaRequired"] is True, r.text
    r = await server.client.post("/api/auth/login/mfa", json={"mfaToken": r.data["mfaToken"],
                                                               "method": "recovery_code", "code": codes[0]})
    assert r.status == 200, r.text


# ---- a recent sign-in for removal and new codes --------------------------------------------------------

async def sign_in_again(server, browser: PageSession, page: Page, user: dict, secret: str) -> Page:
    """The sign-in form the refusal showed: password, then the app's code; back on the page."""
    assert page.status == 403 and page.login_form() is not None, (page.status, page.text[:300])
    assert_page_headers(page)
    assert "sign in again" in page.text, page.text[:400]
    step = await browser.submit(page, page.login_form(), {"email": user["email"], "password": user["password"]})
    assert step.status == 200 and "Second step" in step.text, (step.status, step.text[:300])
    form = next(f for f in step.forms if f.has_input("code"))
    back = await browser.follow(await browser.submit(step, form, {"method": "totp",
                                                                  "code": oathtool(secret, server.clock.now())}))
    assert back.status == 200 and back.url.split("?")[0].endswith(SECURITY), (back.status, back.url)
    assert "signed in again" in notice(back), notice(back)
    return back


async def test_removal_and_new_codes_need_a_recent_sign_in(server):
    user, token, browser, page = await signed_in(server)
    done, secret, codes = await enrol(server, browser, page)
    page = await browser.get(SECURITY)
    server.clock.advance(301)

    refused = await browser.submit(page, form_to(page, REMOVE_FORM))
    assert (await security_api(server, token))["totp"] is True
    refused_codes = await browser.submit(page, form_to(page, CODES_FORM))
    assert refused_codes.status == 403 and refused_codes.login_form() is not None
    assert codes_on(refused_codes) == []

    page = await sign_in_again(server, browser, refused, user, secret)
    fresh = await browser.submit(page, form_to(page, CODES_FORM))
    assert fresh.status == 200, (fresh.status, fresh.text[:300])
    new_codes = codes_on(fresh)
    assert len(new_codes) == 10 and not set(new_codes) & set(codes), new_codes

    removed = await browser.follow(await browser.submit(fresh, form_to(fresh, REMOVE_FORM)))
    assert removed.status == 200 and totp_status(removed) == "Off", (removed.status, removed.text[:300])
    assert "removed" in notice(removed)
    assert await security_api(server, token) == {"passkeys": [], "totp": False, "recoveryCodesLeft": 0}
    assert has_form_to(removed, TOTP_FORM)


# ---- XSRF and headers ----------------------------------------------------------------------------------

async def test_every_security_form_without_its_xsrf_token_is_refused(server):
    user, token, browser, page = await signed_in(server)
    refused = await browser.submit(page, form_to(page, TOTP_FORM), drop=["_xsrf"])
    assert_error_page(refused, 403, "request.xsrf_failed")
    assert secret_on_or_none(refused) is None

    shown, secret = await start_enrolment(browser, page)
    code = oathtool(secret, server.clock.now())
    refused = await browser.submit(shown, form_to(shown, CONFIRM_FORM), {"code": code}, drop=["_xsrf"])
    assert_error_page(refused, 403, "request.xsrf_failed")
    assert (await security_api(server, token))["totp"] is False
    forged = await browser.submit(shown, form_to(shown, CONFIRM_FORM), {"code": code, "_xsrf": "2|00|11|22"})
    assert_error_page(forged, 403, "request.xsrf_failed")
    assert (await security_api(server, token))["totp"] is False

    done = await browser.submit(shown, form_to(shown, CONFIRM_FORM), {"code": code})
    codes = codes_on(done)
    assert len(codes) == 10
    page = await browser.get(SECURITY)
    for path in (REMOVE_FORM, CODES_FORM):
        refused = await browser.submit(page, form_to(page, path), drop=["_xsrf"])
        assert_error_page(refused, 403, "request.xsrf_failed")
        assert codes_on(refused) == []
    assert await security_api(server, token) == {"passkeys": [], "totp": True, "recoveryCodesLeft": 10}


def secret_on_or_none(page: Page) -> str | None:
    return None if 'id="totp-secret"' not in page.response.text else secret_on(page)


async def test_the_security_page_sends_the_page_headers_and_runs_no_inline_script(server):
    visitor = PageSession(server)
    first = await visitor.get(SECURITY)
    assert first.status == 200 and first.login_form() is not None  # a visitor meets the sign-in form
    _, _, browser, page = await signed_in(server)
    shown, _ = await start_enrolment(browser, page)
    for answer in (first, page, shown):
        assert_page_headers(answer)
        csp = answer.response.headers["Content-Security-Policy"]
        directives = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
        scripts = directives.get("script-src", directives.get("default-src"))
        assert scripts is not None and "'unsafe-inline'" not in scripts, csp
        assert directives["default-src"] == ["'none'"], csp
        # scripts only from files (static/passkeys.js), none inline
        tags = re.findall(r"<script\b[^>]*>(.*?)</script>", answer.response.text, re.S | re.I)
        assert all(body.strip() == "" for body in tags), tags
        assert all('src="/static/' in tag for tag in re.findall(r"<script\b[^>]*>", answer.response.text, re.I))


# ---- in Chromium, with the keyboard, on a phone --------------------------------------------------------

async def test_a_user_sets_up_an_authenticator_app_with_the_keyboard_in_chromium(browser, server, tmp_path,
                                                                                 request):
    from playwright.async_api import expect

    from tests.test_browser import PHONE, focused, log_in, open_tab, page_problems, screenshot

    user = await server.create_user()
    tab = await open_tab(browser, server)
    page = tab.page
    await page.set_viewport_size(PHONE)
    await log_in(tab, user["email"], user["password"])
    await page.goto(tab.url(ACCOUNT))
    await page.get_by_role("link", name="Second factors and recovery codes").click()
    await page.wait_for_url(tab.url(SECURITY))
    await expect(page.locator("#totp-status")).to_have_text("Off")
    assert await page_problems(page) == []

    # Tab to "Set up an authenticator app", each stop with its focus ring, and press Enter
    for _ in range(20):
        await page.keyboard.press("Tab")
        now = await focused(page)
        assert now["ring"] == "yes", f"no visible focus on {now}"
        if now["text"] == "Set up an authenticator app":
            break
    else:
        raise AssertionError("Tab never reached the set-up button")
    await page.keyboard.press("Enter")
    await expect(page.locator("svg")).to_be_visible()
    secret = (await page.locator("#totp-secret").inner_text()).replace(" ", "")
    assert re.fullmatch(r"[A-Z2-7]{16,}", secret), secret
    assert await page_problems(page) == []
    await screenshot(tab, tmp_path, request, "security-qr", "account-security-qr")

    # the code field has the focus (autofocus): type the app's code, press Enter
    code_field = page.get_by_label("Code from your app")
    await expect(code_field).to_be_focused()
    await page.keyboard.type(oathtool(secret, server.clock.now()))
    await page.keyboard.press("Enter")
    await expect(page.locator("#recovery-codes code")).to_have_count(10)
    await expect(page.get_by_role("status")).to_contain_text("authenticator app is set up")
    await expect(page.locator("#totp-status")).to_have_text("On")
    assert await page_problems(page) == []
    await screenshot(tab, tmp_path, request, "security", "account-security")
    tab.assert_first_party()
    tab.assert_no_csp_violation()


# ---- LBAUTH_MFA=required: pages and codes wait for a second factor ----------------------------------------

async def test_with_mfa_required_pages_and_codes_wait_until_a_factor_is_set_up(tmp_path, database_url):
    """A user without a second factor is sent to the security page from every page, and from an
    authorization request, which resumes once an authenticator app is set up; no code before."""
    from urllib.parse import parse_qs, urlsplit

    from tests.conftest import running_server
    from tests.flow_helpers import REGISTERED_URI, front_params, full_setup, oauth_url
    from tests.test_flow_pages import assert_redirect

    async with running_server(tmp_path, database_url, mfa="required") as srv:
        s = await full_setup(srv)
        browser = PageSession(srv)
        page = await browser.open_logged_in(oauth_url(front_params(s.client_id, s.redirect_uri)), s.user["email"],
                                            s.user["password"])
        # the request waits: the security page, saying why, with the request to come back to
        assert page.status == 200 and urlsplit(page.url).path == SECURITY, (page.status, page.url, page.text[:300])
        back = parse_qs(urlsplit(page.url).query)["next"][0]
        assert back.startswith("/oauth/?") and "client_id" in back
        assert "asks every account for a second factor" in page.text
        for path in (ACCOUNT, "/account/sessions", "/account/apps", "/console/"):
            other = await browser.get(path)
            assert other.status == 302 and other.location.startswith(SECURITY + "?enrol=required"), (path, other.status)
        silent = await browser.get(oauth_url(front_params(s.client_id, s.redirect_uri, scope="openid userinfo",
                                                          prompt="none")))
        assert assert_redirect(silent, REGISTERED_URI)["error"] == ["interaction_required"]
        body = {"clientId": s.client_id, "redirectUri": s.redirect_uri, "scope": ["userinfo"]}
        api = await srv.client.post("/api/oauth/authorize/external", bearer=s.token, json=body)
        api.assert_error(403, "auth.mfa.enrolment_required")

        # set up an authenticator app from the page; then "Continue" goes back to the request
        shown = await browser.submit(page, form_to(page, TOTP_FORM))
        confirmed = await browser.submit(shown, form_to(shown, CONFIRM_FORM),
                                         {"code": oathtool(secret_on(shown), srv.clock.now())})
        assert confirmed.status == 200 and len(codes_on(confirmed)) == 10, confirmed.text[:300]
        link = re.search(r'<a [^>]*id="continue" href="([^"]+)"', confirmed.response.text)
        assert link is not None, confirmed.text[:600]
        resumed = await browser.follow(await browser.get(html.unescape(link.group(1))))
        assert resumed.consent_form() is not None, (resumed.status, resumed.text[:300])
        assert (await browser.get(ACCOUNT)).status == 200
