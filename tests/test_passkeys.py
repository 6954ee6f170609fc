"""Passkeys (WebAuthn) in a real Chromium, with its virtual authenticator driven over the DevTools
protocol (`WebAuthn.addVirtualAuthenticator`: CTAP2, internal, resident keys, user verification),
on both databases. The server's public address is http://localhost:PORT: Chromium refuses
127.0.0.1 as a relying party ID.

A user adds a passkey at /account/security (and gets their recovery codes), signs in with it and no
email ("Sign in with a passkey"), through autofill on the email field, and as the second step after
the password; a second authenticator; removal (a recent sign-in needed). Refused: a credential of
another user as someone's second step, a passkey whose authenticator returns another user's handle,
an authenticator that did not verify the user, a removed passkey, a challenge used twice, a passkey
after an operator's `reset-factors`. The pages that run static/passkeys.js allow no other script.

Assumed markup (not fixed by the contract): the passkeys are the `li.passkey-item` of `#passkeys`
(name in `.passkey-name`), each with a "Remove" button; the add form has a "Name it" field and an
"Add a passkey" button; the new recovery codes are the `<code>` items of `#passkey-recovery-codes`.
"""

from __future__ import annotations

import base64
import secrets
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from tests.conftest import arun_cli, running_server
from tests.flow_helpers import REGISTERED_URI, exchange, front_params, oauth_url
from tests.support import unverified_claims, wait_until
from tests.test_browser import Tab, decide, open_tab, page_problems, screenshot

SECURITY = "/account/security"
SESSION_COOKIE = "lbauth_session"
REPORT_CSP_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (event) => console.error(
  `Content Security Policy violation: ${event.violatedDirective} blocked ${event.blockedURI || "inline"}`));"""
AUTHENTICATOR = {"protocol": "ctap2", "ctap2Version": "ctap2_1", "transport": "internal", "hasResidentKey": True,
                 "hasUserVerification": True, "isUserVerified": True, "automaticPresenceSimulation": True}


@pytest.fixture
async def local_server(tmp_path, database_url):
    async with running_server(tmp_path, database_url, localhost=True) as srv:
        yield srv


class Device:
    """A browser tab with virtual authenticators (CDP WebAuthn domain)."""

    def __init__(self, tab: Tab, cdp: Any) -> None:
        self.tab, self.cdp, self.authenticators = tab, cdp, []

    @property
    def page(self) -> Any:
        return self.tab.page

    async def add_authenticator(self, **options: Any) -> str:
        answer = await self.cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {**AUTHENTICATOR, **options}})
        self.authenticators.append(answer["authenticatorId"])
        return answer["authenticatorId"]

    async def remove_authenticator(self, authenticator_id: str) -> None:
        await self.cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": authenticator_id})
        self.authenticators.remove(authenticator_id)

    async def credentials(self, authenticator_id: str) -> list[dict]:
        return (await self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id}))["credentials"]

    async def add_credential(self, authenticator_id: str, credential: dict) -> None:
        await self.cdp.send("WebAuthn.addCredential", {"authenticatorId": authenticator_id, "credential": credential})

    async def set_user_verified(self, authenticator_id: str, verified: bool) -> None:
        await self.cdp.send("WebAuthn.setUserVerified", {"authenticatorId": authenticator_id,
                                                         "isUserVerified": verified})

    async def session_cookie(self) -> str | None:
        """The browser session cookie this tab holds, if any."""
        found = [c["value"] for c in await self.page.context.cookies() if c["name"] == SESSION_COOKIE]
        return found[0] if found else None

    async def replace_authenticator(self, credential: dict | None = None, **options: Any) -> str:
        """Every authenticator of the tab removed, a fresh one added (holding `credential`, if given)."""
        for old in list(self.authenticators):
            await self.remove_authenticator(old)
        new = await self.add_authenticator(**options)
        if credential is not None:
            await self.add_credential(new, credential)
        return new


@asynccontextmanager
async def device(browser: Any, server: Any):
    tab = await open_tab(browser, server)  # the app's redirect URI intercepted, requests and console kept
    context, page = tab.page.context, tab.page
    # A CSP violation is reported on the console, where Tab.assert_no_csp_violation looks for it, by
    # the page's own `securitypolicyviolation` event (Chromium's own report is not a console message).
    await context.add_init_script(REPORT_CSP_VIOLATIONS)
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    try:
        yield Device(tab, cdp)
    finally:
        await context.close()


async def sign_in_with_password(d: Device, email: str, password: str, next_path: str = SECURITY) -> None:
    page = d.page
    await page.goto(d.tab.url(f"/login?next={next_path}"))
    await page.get_by_label("Email", exact=True).fill(email)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.wait_for_url(lambda url: urlsplit(url).path != "/login")


async def add_passkey(d: Device, name: str) -> list[str]:
    """On the security page: name it, press "Add a passkey"; the recovery codes shown (first factor)."""
    from playwright.async_api import expect
    page = d.page
    await page.goto(d.tab.url(SECURITY))
    await page.get_by_label("Name it").fill(name)
    await page.get_by_role("button", name="Add a passkey").click()
    codes_box = page.locator("#passkey-recovery-codes code")
    added_notice = page.get_by_role("status").filter(has_text="passkey was added")
    problem = page.locator("#passkey-add-error:not([hidden])")
    await expect(codes_box.or_(added_notice).or_(problem).first).to_be_visible()
    assert not await problem.is_visible(), await problem.inner_text()
    codes = await codes_box.all_inner_texts()
    if codes:
        await page.get_by_role("link", name="I have stored them").click()
    await expect(page.locator("#passkeys .passkey-name").filter(has_text=name)).to_be_visible()
    return codes


async def sign_out(d: Device) -> None:
    await d.page.goto(d.tab.url("/account/"))
    await d.page.get_by_role("button", name="Sign out").click()
    await d.page.wait_for_url(lambda url: urlsplit(url).path == "/login")


async def without_autofill(d: Device) -> None:
    """This tab's later pages run in a browser that offers no passkey autofill (conditional
    mediation): Chromium's virtual authenticator, with no UI, would answer the sign-in page's
    autofill request as soon as the page loads, before any button is pressed."""
    await d.page.add_init_script(
        "PublicKeyCredential.isConditionalMediationAvailable = () => Promise.resolve(false);")


def api_security(server: Any, token: str) -> Any:
    return server.client.get("/api/account/security", headers={"Authorization": f"Bearer {token}"})


async def used(server: Any, token: str) -> dict[str, str | None]:
    """Each passkey's name -> when it was last used (None: never), as the API lists them."""
    answer = await api_security(server, token)
    assert answer.status == 200, answer.text
    return {p["name"]: p["lastUsedAt"] for p in answer.data["passkeys"]}


async def password_step(d: Device, email: str, password: str, next_path: str = SECURITY) -> None:
    """The password on /login, for a user with a passkey: the second-step page, with "Use a passkey"."""
    from playwright.async_api import expect
    page = d.page
    await page.goto(d.tab.url("/login?" + urlencode({"next": next_path})))
    await page.get_by_label("Email", exact=True).fill(email)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await expect(page.get_by_role("heading", name="Second step")).to_be_visible()
    await expect(page.get_by_role("button", name="Use a passkey")).to_be_visible()


async def passkey_sign_in(d: Device, next_path: str = "/account/sessions") -> None:
    """"Sign in with a passkey" on /login (no email), and on to `next_path`."""
    await d.page.goto(d.tab.url("/login?" + urlencode({"next": next_path})))
    await d.page.get_by_role("button", name="Sign in with a passkey").click()
    await d.page.wait_for_url(lambda url: urlsplit(url).path == urlsplit(next_path).path)


async def refused_passkey_sign_in(d: Device) -> tuple[int, dict]:
    """"Sign in with a passkey" on /login, refused: the error shown in #passkey-error, the page stays,
    no session cookie. The server's answer to POST /login/passkey: status and envelope."""
    from playwright.async_api import expect
    page = d.page
    await page.goto(d.tab.url("/login?next=/account/sessions"))
    async with page.expect_response(lambda r: urlsplit(r.url).path == "/login/passkey") as answer:
        await page.get_by_role("button", name="Sign in with a passkey").click()
    response = await answer.value
    await expect(page.locator("#passkey-error")).to_be_visible()
    assert urlsplit(page.url).path == "/login", page.url
    assert await d.session_cookie() is None
    return response.status, await response.json()


# In the page, as static/passkeys.js does but by hand: the options from `optionsPath` (with the page's
# XSRF token), changed as a test wants, then the authenticator's answer as JSON (credential.toJSON()).
GET_ASSERTION = """async ({optionsPath, dropAllowCredentials, userVerification}) => {
  const xsrf = document.querySelector('input[name="_xsrf"]').value;
  const answer = await fetch(optionsPath, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-XSRFToken": xsrf}, body: "{}"});
  const envelope = await answer.json();
  if (!answer.ok) throw new Error(`${optionsPath}: ${answer.status} ${JSON.stringify(envelope)}`);
  const options = envelope.data;
  if (dropAllowCredentials) delete options.allowCredentials;
  if (userVerification) options.userVerification = userVerification;
  const credential = await navigator.credentials.get(
    {publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options)});
  return credential.toJSON();
}"""
POST_JSON = """async ({path, body}) => {
  const xsrf = document.querySelector('input[name="_xsrf"]').value;
  const answer = await fetch(path, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-XSRFToken": xsrf}, body: JSON.stringify(body)});
  return {status: answer.status, body: await answer.json()};
}"""


async def assertion(d: Device, options_path: str, *, drop_allow_credentials: bool = False,
                    user_verification: str | None = None) -> dict:
    return await d.page.evaluate(GET_ASSERTION, {"optionsPath": options_path,
                                                 "dropAllowCredentials": drop_allow_credentials,
                                                 "userVerification": user_verification})


async def post_json(d: Device, path: str, body: dict) -> tuple[int, dict]:
    answer = await d.page.evaluate(POST_JSON, {"path": path, "body": body})
    return answer["status"], answer["body"]


def with_user_handle(credential: dict, user_id: str) -> dict:
    """A copy of a CDP credential whose authenticator says it belongs to the account `user_id`."""
    return {**credential, "userHandle": base64.b64encode(user_id.encode()).decode()}


# ---- the tests ------------------------------------------------------------------------------------------

async def test_a_user_adds_a_passkey_and_signs_in_with_it_without_an_email(browser, local_server, tmp_path,
                                                                          request):
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    async with device(browser, server) as d:
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        assert await page_problems(d.page) == []
        codes = await add_passkey(d, "My laptop")
        assert len(codes) == 10 and len(set(codes)) == 10, codes
        await expect(d.page.get_by_role("status")).to_contain_text("passkey was added")
        await screenshot(d.tab, tmp_path, request, "passkeys", "account-security-passkeys")

        listed = (await api_security(server, token)).data
        assert [p["name"] for p in listed["passkeys"]] == ["My laptop"], listed
        assert set(listed["passkeys"][0]) == {"id", "name", "createdAt", "lastUsedAt", "synced"}
        assert listed["passkeys"][0]["lastUsedAt"] is None and listed["recoveryCodesLeft"] == 10

        await without_autofill(d)  # the button, not autofill, which Chromium's virtual authenticator answers at once
        await sign_out(d)
        await d.page.goto(d.tab.url("/login?next=/account/sessions"))
        await expect(d.page.get_by_role("button", name="Sign in with a passkey")).to_be_visible()
        await screenshot(d.tab, tmp_path, request, "sign-in", "sign-in-with-a-passkey")
        await d.page.get_by_role("button", name="Sign in with a passkey").click()
        await d.page.wait_for_url(lambda url: urlsplit(url).path == "/account/sessions")
        listed = (await api_security(server, token)).data
        assert listed["passkeys"][0]["lastUsedAt"] is not None, listed
        d.tab.assert_first_party()
        d.tab.assert_no_csp_violation()


async def test_a_passkey_sign_in_through_autofill_on_the_email_field(browser, local_server):
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Phone")
        await sign_out(d)
        # the sign-in page asks for the passkeys as autofill (conditional mediation) on load; the
        # virtual authenticator, with its UI off, answers with the one it holds
        await d.page.goto(d.tab.url("/login?next=/account/apps"))
        await d.page.wait_for_url(lambda url: urlsplit(url).path == "/account/apps")
        # a browser without passkey autofill: the page stays, the email field is there to type in
        await without_autofill(d)
        await sign_out(d)
        await d.page.goto(d.tab.url("/login?next=/account/apps"))
        await d.page.get_by_label("Email", exact=True).fill("someone@example.com")
        assert urlsplit(d.page.url).path == "/login"
        d.tab.assert_no_csp_violation()



async def test_a_passkey_as_the_second_step_after_the_password(browser, local_server):
    """The password, then "Use a passkey" on the second-step page: the sign-in goes on to where it
    was going (here an app's authorization request), and the tokens say how: amr pwd hwk mfa, acr phr."""
    server = local_server
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "My laptop")
        await sign_out(d)

        server.clock.advance(120)
        nonce = secrets.token_urlsafe(12)
        request = oauth_url(front_params(app["clientId"], REGISTERED_URI, state="second-step",
                                         scope="openid userinfo", nonce=nonce))
        await password_step(d, user["email"], user["password"], next_path=request)
        assert await d.session_cookie() is None  # the password alone opened no session
        signed_in_at = int(server.clock.now())
        await d.page.get_by_role("button", name="Use a passkey").click()
        from playwright.async_api import expect
        await expect(d.page.get_by_role("button", name="Approve")).to_be_visible()  # the app's consent
        assert await d.session_cookie() is not None
        assert server.services.metrics.second_steps.labels("passkey", "succeeded")._value.get() == 1  # /metrics
        query = await decide(d.tab, "Approve")
        assert query["state"] == ["second-step"], query

        server.clock.advance(5)
        r = await exchange(server, query["code"][0], REGISTERED_URI, app["clientId"], app["clientSecret"])
        assert r.status == 200, r.text
        id_token, access = unverified_claims(r.data["idToken"]), unverified_claims(r.data["accessToken"])
        assert id_token["nonce"] == nonce
        for claims in (id_token, access):
            assert (claims["amr"], claims["acr"], claims["auth_time"]) == (["pwd", "hwk", "mfa"], "phr", signed_in_at)
        d.tab.assert_first_party()
        d.tab.assert_no_csp_violation()


async def test_a_second_authenticator_and_a_passkey_brought_back_into_a_new_one(browser, local_server):
    """The first authenticator gone (its passkey kept aside, as on a device put away), a second one
    added: a second passkey, both listed, the second signs in; the first, put into a fresh
    authenticator, signs in too. Each sign-in is the passkey it says (its last use)."""
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    async with device(browser, server) as d:
        await without_autofill(d)
        first = await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        (laptop,) = await d.credentials(first)
        assert laptop["isResidentCredential"] and base64.b64decode(laptop["userHandle"]) == user["userId"].encode()

        second = await d.replace_authenticator()
        assert await d.credentials(second) == []
        codes = await add_passkey(d, "Phone")
        assert codes == []  # recovery codes came with the first factor only
        await expect(d.page.locator("#passkeys .passkey-item")).to_have_count(2)
        await expect(d.page.locator("#passkeys-count")).to_have_text("2")
        assert await used(server, token) == {"Laptop": None, "Phone": None}

        await sign_out(d)
        server.clock.advance(60)
        await passkey_sign_in(d)
        phone_used = (await used(server, token))["Phone"]
        assert phone_used is not None and (await used(server, token))["Laptop"] is None

        await sign_out(d)
        await d.replace_authenticator(laptop)
        server.clock.advance(60)
        await passkey_sign_in(d)
        last = await used(server, token)
        assert last["Laptop"] is not None and last["Laptop"] > phone_used and last["Phone"] == phone_used, last
        d.tab.assert_no_csp_violation()


async def test_removing_a_passkey_needs_a_recent_sign_in_and_a_removed_one_signs_in_no_more(browser, local_server):
    """Within 5 minutes of signing in, "Remove" takes the passkey off the list; 6 minutes later the
    page asks to sign in again first (403, the sign-in form), as the API does
    (auth.reauthentication.required); signing in again with a passkey lets the removal through. A
    removed passkey, still in an authenticator, is refused at the sign-in page."""
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    async with device(browser, server) as d:
        await without_autofill(d)
        first = await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        (laptop,) = await d.credentials(first)
        await d.replace_authenticator()
        await add_passkey(d, "Phone")
        await expect(d.page.locator("#passkeys .passkey-item")).to_have_count(2)

        server.clock.advance(240)  # still a recent sign-in
        await d.page.get_by_role("button", name="Remove the passkey Laptop").click()
        await d.page.wait_for_url(lambda url: "saved=passkey_removed" in url)
        await expect(d.page.get_by_role("status")).to_contain_text("The passkey was removed")
        await expect(d.page.locator("#passkeys .passkey-name")).to_have_text(["Phone"])
        assert list(await used(server, token)) == ["Phone"]

        server.clock.advance(120)  # 6 minutes after the sign-in
        async with d.page.expect_response(lambda r: urlsplit(r.url).path.endswith("/remove")) as answer:
            await d.page.get_by_role("button", name="Remove the passkey Phone").click()
        assert (await answer.value).status == 403
        await expect(d.page.get_by_role("heading", name="Sign in", exact=True)).to_be_visible()
        await expect(d.page.get_by_role("alert").first).to_contain_text("sign in again to remove a passkey")
        await expect(d.page.get_by_label("Email", exact=True)).to_have_value(user["email"])
        assert list(await used(server, token)) == ["Phone"]
        phone_id = (await api_security(server, token)).data["passkeys"][0]["id"]
        (await server.client.delete(f"/api/account/security/passkeys/{phone_id}", bearer=token)).assert_error(
            403, "auth.reauthentication.required")
        assert list(await used(server, token)) == ["Phone"]

        # signing in again, here with the passkey that is left, and the removal goes through
        await d.page.get_by_role("button", name="Sign in with a passkey").click()
        await d.page.wait_for_url(lambda url: "saved=reauthenticated" in url)
        await d.page.get_by_role("button", name="Remove the passkey Phone").click()
        await d.page.wait_for_url(lambda url: "saved=passkey_removed" in url)
        await expect(d.page.get_by_role("status")).to_contain_text("and your recovery codes with it")
        await expect(d.page.locator("#no-passkeys")).to_be_visible()
        listed = (await api_security(server, token)).data
        assert listed["passkeys"] == [] and listed["recoveryCodesLeft"] == 0, listed

        await sign_out(d)
        await d.replace_authenticator(laptop)  # the passkey removed first, still on a device
        status, envelope = await refused_passkey_sign_in(d)
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        await expect(d.page.locator("#passkey-error")).to_contain_text("That passkey was not accepted")
        d.tab.assert_no_csp_violation()


async def test_a_passkey_of_another_user_is_refused_as_someones_second_step(browser, local_server):
    """A's password is right; at A's second step the authenticator answers with B's passkey (the
    options' allowCredentials dropped, so it may): 401 auth.mfa.failed, and no session. A's own
    passkey, on the same page, then finishes the sign-in."""
    from playwright.async_api import expect
    server = local_server
    a, b = await server.create_user(), await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        a_device = await d.add_authenticator()
        await sign_in_with_password(d, a["email"], a["password"])
        await add_passkey(d, "A's laptop")
        (a_credential,) = await d.credentials(a_device)
        await sign_out(d)
        b_device = await d.replace_authenticator()
        await sign_in_with_password(d, b["email"], b["password"])
        await add_passkey(d, "B's laptop")
        (b_credential,) = await d.credentials(b_device)
        assert base64.b64decode(b_credential["userHandle"]) == b["userId"].encode()
        await sign_out(d)

        await password_step(d, a["email"], a["password"])
        answer = await assertion(d, "/login/mfa/passkey/options", drop_allow_credentials=True)
        assert answer["id"] == b_credential["credentialId"].replace("+", "-").replace("/", "_").rstrip("=")
        status, envelope = await post_json(d, "/login/mfa/passkey", {"credential": answer, "next": SECURITY})
        assert (status, envelope.get("subCode")) == (401, "auth.mfa.failed"), envelope
        assert await d.session_cookie() is None
        await d.page.goto(d.tab.url("/account/sessions"))
        await expect(d.page.get_by_role("heading", name="Sign in", exact=True)).to_be_visible()

        # the same way with A's passkey: the step was refused, not broken
        await d.replace_authenticator(a_credential)
        await password_step(d, a["email"], a["password"])
        await d.page.get_by_role("button", name="Use a passkey").click()
        await d.page.wait_for_url(lambda url: urlsplit(url).path == SECURITY)
        assert await d.session_cookie() is not None
        d.tab.assert_no_csp_violation()


async def test_a_passkey_whose_authenticator_names_another_account_is_refused(browser, local_server):
    """A's passkey in an authenticator that says it belongs to B (its userHandle B's id): the
    usernameless sign-in is refused (401 auth.login.failed, shown on /login). The same passkey with
    A's own handle signs A in."""
    server = local_server
    a, b = await server.create_user(), await server.create_user()
    token = await server.login(a["email"], a["password"])
    async with device(browser, server) as d:
        await without_autofill(d)
        first = await d.add_authenticator()
        await sign_in_with_password(d, a["email"], a["password"])
        await add_passkey(d, "Laptop")
        (credential,) = await d.credentials(first)
        await sign_out(d)

        await d.replace_authenticator(with_user_handle(credential, b["userId"]))
        status, envelope = await refused_passkey_sign_in(d)
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        assert await used(server, token) == {"Laptop": None}

        await d.replace_authenticator(with_user_handle(credential, a["userId"]))
        await passkey_sign_in(d)
        assert (await used(server, token))["Laptop"] is not None
        d.tab.assert_no_csp_violation()


async def test_an_authenticator_that_did_not_verify_the_user_signs_no_one_in(browser, local_server):
    """User verification off in the authenticator: "Sign in with a passkey" fails and no session
    cookie is set; an assertion the authenticator made without verifying the user (the options'
    userVerification lowered in the page) is refused by the server (401). Verified again, it works."""
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        authenticator = await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        await sign_out(d)

        await d.set_user_verified(authenticator, False)
        await d.page.goto(d.tab.url("/login?next=/account/sessions"))
        await d.page.get_by_role("button", name="Sign in with a passkey").click()
        await expect(d.page.locator("#passkey-error")).to_be_visible()
        assert urlsplit(d.page.url).path == "/login" and await d.session_cookie() is None

        unverified = await assertion(d, "/login/passkey/options", user_verification="discouraged")
        flags = base64.urlsafe_b64decode(unverified["response"]["authenticatorData"] + "==")[32]
        assert flags & 0x01 and not flags & 0x04, f"{flags:#04x}: user present, not verified"
        status, envelope = await post_json(d, "/login/passkey", {"credential": unverified, "next": "/account/apps"})
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        assert await d.session_cookie() is None

        await d.set_user_verified(authenticator, True)
        await passkey_sign_in(d)
        assert await d.session_cookie() is not None
        d.tab.assert_no_csp_violation()


async def test_a_passkey_answer_signs_in_once(browser, local_server):
    """One assertion, captured in the page, posted to /login/passkey twice: the first signs in, the
    second (its challenge used) is 401 and changes nothing."""
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        await sign_out(d)

        await d.page.goto(d.tab.url("/login"))
        captured = await assertion(d, "/login/passkey/options")
        status, envelope = await post_json(d, "/login/passkey", {"credential": captured, "next": "/account/apps"})
        assert (status, envelope["data"]) == (200, {"next": "/account/apps"}), envelope
        first = await d.session_cookie()
        assert first is not None

        status, envelope = await post_json(d, "/login/passkey", {"credential": captured, "next": "/account/apps"})
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        assert await d.session_cookie() == first
        await d.page.goto(d.tab.url("/account/apps"))  # the first sign-in's session is still the one
        assert urlsplit(d.page.url).path == "/account/apps"
        from playwright.async_api import expect
        await expect(d.page.get_by_role("button", name="Sign out")).to_be_visible()
        d.tab.assert_no_csp_violation()


async def test_an_operators_reset_factors_removes_the_passkeys(browser, local_server, tmp_path, database_url):
    """`lbauth users reset-factors EMAIL` (a user who lost their devices): the API lists no passkey
    and no recovery code, the passkey, which signed in before, signs in no more, and the password
    alone signs in (no second step).

    The sessions the command ends are not checked here: the command runs on the real clock, this
    server on a frozen one years ahead, to which the command's change-feed entries look expired
    (tests/test_second_factors.py checks that part over the API)."""
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        await sign_out(d)
        await passkey_sign_in(d)  # it works before the reset
        await sign_out(d)

        done = await arun_cli("users", "reset-factors", user["email"], "--json",
                              env={"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")})
        assert done.returncode == 0, done.stderr
        answer = await server.client.post("/api/auth/login",
                                          json={"email": user["email"], "password": user["password"]})
        assert answer.status == 200 and "mfaRequired" not in answer.data, answer.text  # no second step any more
        listed = (await api_security(server, answer.data["token"])).data
        assert listed["passkeys"] == [] and listed["recoveryCodesLeft"] == 0, listed

        status, envelope = await refused_passkey_sign_in(d)
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        await sign_in_with_password(d, user["email"], user["password"])  # straight on, no second-step page
        assert urlsplit(d.page.url).path == SECURITY
        d.tab.assert_no_csp_violation()


def script_policy(csp: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header's directives, name -> sources."""
    directives = {}
    for part in csp.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


# Every <script> of the page, and any inline event handler attribute (onclick=...), which
# `script-src 'self'` would block.
INLINE_SCRIPTS = """() => ({
  scripts: [...document.scripts].map((s) => s.getAttribute("src")),
  handlers: [...document.querySelectorAll("*")].flatMap((el) =>
    [...el.attributes].filter((a) => a.name.startsWith("on")).map((a) => `${el.tagName}[${a.name}]`)),
})"""


async def test_the_passkey_pages_run_only_their_own_script_file(browser, local_server):
    """/login, the second-step page and /account/security: a CSP with `script-src 'self'` (no
    'unsafe-inline', no 'unsafe-eval'; `connect-src 'self'` for the script's calls), no inline
    script on the page, and no CSP violation during the sign-ins. An inline script slipped into the
    page is blocked and seen, so the check would see one of the pages' own."""
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        page = d.page
        checked = {}

        async def check(name: str, response: Any) -> None:
            assert response is not None and response.ok, (name, response and response.status)
            policy = script_policy(response.headers["content-security-policy"])
            assert policy["script-src"] == ["'self'"], (name, policy)
            assert policy["connect-src"] == ["'self'"] and policy["default-src"] == ["'none'"], (name, policy)
            assert not any("unsafe" in source for sources in policy.values() for source in sources), (name, policy)
            found = await page.evaluate(INLINE_SCRIPTS)
            assert found["scripts"] == ["/static/passkeys.js"] and found["handlers"] == [], (name, found)
            checked[name] = policy

        await check("login", await page.goto(d.tab.url("/login")))
        await page.get_by_label("Email", exact=True).fill(user["email"])
        await page.get_by_label("Password", exact=True).fill(user["password"])
        await page.get_by_role("button", name="Sign in", exact=True).click()
        await page.wait_for_url(lambda url: urlsplit(url).path != "/login")
        await check("security", await page.goto(d.tab.url(SECURITY)))
        await add_passkey(d, "Laptop")
        await sign_out(d)

        async with page.expect_response(lambda r: r.request.method == "POST" and urlsplit(r.url).path == "/login"
                                        ) as second_step:
            await password_step(d, user["email"], user["password"])
        await check("second step", await second_step.value)
        await page.get_by_role("button", name="Use a passkey").click()
        await page.wait_for_url(lambda url: urlsplit(url).path == SECURITY)
        await sign_out(d)
        await passkey_sign_in(d)
        assert set(checked) == {"login", "security", "second step"}
        d.tab.assert_no_csp_violation()

        # the detector: an inline script added to the page is refused, and reported
        await page.goto(d.tab.url("/login"))
        await page.evaluate("""() => { const s = document.createElement("script");
                                       s.textContent = "window.inlineRan = true"; document.head.append(s); }""")
        assert await page.evaluate("() => window.inlineRan === undefined")
        await wait_until(lambda: any("Content Security Policy" in m for m in d.tab.console), 5, "a CSP report")
        with pytest.raises(AssertionError):
            d.tab.assert_no_csp_violation()


async def test_a_synced_passkey_is_shown_as_synced_and_signs_in_as_a_software_key(browser, local_server):
    """A passkey whose authenticator may back it up (a synced one, backup eligible): the list says
    "Synced", the API `synced: true`, and a sign-in with it (no email, on the way to an app) gives
    tokens with amr swk user mfa, still acr phr."""
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    app = await server.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator(defaultBackupEligibility=True)
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Phone")
        await expect(d.page.locator("#passkeys .passkey-item").filter(has_text="Phone").locator(".badge")).to_have_text(
            "Synced")
        assert [p["synced"] for p in (await api_security(server, token)).data["passkeys"]] == [True]
        await sign_out(d)

        server.clock.advance(60)
        signed_in_at = int(server.clock.now())
        await passkey_sign_in(d, oauth_url(front_params(app["clientId"], REGISTERED_URI, state="synced",
                                                        scope="openid userinfo")))
        query = await decide(d.tab, "Approve")
        r = await exchange(server, query["code"][0], REGISTERED_URI, app["clientId"], app["clientSecret"])
        assert r.status == 200, r.text
        for claims in (unverified_claims(r.data["idToken"]), unverified_claims(r.data["accessToken"])):
            assert (claims["amr"], claims["acr"], claims["auth_time"]) == (["swk", "user", "mfa"], "phr", signed_in_at)
        d.tab.assert_no_csp_violation()


async def test_signing_in_again_with_a_passkey_never_switches_to_another_account(browser, local_server):
    """A is signed in with a password (and owns a passkey); the device holds B's passkey. A's
    second sign-in (as `acr_values=phr` asks) offers only A's passkeys, and B's answer, even with
    the list dropped, is refused: the session stays A's, no B session is opened."""
    server = local_server
    a, b = await server.create_user(), await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        await sign_in_with_password(d, a["email"], a["password"])
        a_codes = await add_passkey(d, "A's laptop")
        (a_credential,) = await d.credentials(d.authenticators[0])
        await sign_out(d)
        b_device = await d.replace_authenticator()
        await sign_in_with_password(d, b["email"], b["password"])
        await add_passkey(d, "B's laptop")
        (b_credential,) = await d.credentials(b_device)
        await sign_out(d)

        # A signs in with the password and a recovery code (A's passkey is not on this device)
        await password_step(d, a["email"], a["password"], next_path="/account/")
        await d.page.get_by_label("A recovery code").check()
        await d.page.get_by_label("Code", exact=True).fill(a_codes[0])
        await d.page.get_by_role("button", name="Continue").click()
        await d.page.wait_for_url(lambda url: urlsplit(url).path == "/account/")
        a_session = await d.session_cookie()
        await d.page.goto(d.tab.url(SECURITY))  # a page whose policy lets its script call the server
        options = await post_json(d, "/login/passkey/options", {})
        assert options[0] == 200
        b_id = b_credential["credentialId"].replace("+", "-").replace("/", "_").rstrip("=")
        a_id = a_credential["credentialId"].replace("+", "-").replace("/", "_").rstrip("=")
        assert [c["id"] for c in options[1]["data"]["allowCredentials"]] == [a_id]
        answer = await assertion(d, "/login/passkey/options", drop_allow_credentials=True)
        assert answer["id"] == b_id
        status, envelope = await post_json(d, "/login/passkey", {"credential": answer, "next": "/account/"})
        assert (status, envelope.get("subCode")) == (401, "auth.login.failed"), envelope
        assert await d.session_cookie() == a_session
        me = await d.page.goto(d.tab.url("/account/"))
        assert me is not None and a["email"] in await d.page.content() and b["email"] not in await d.page.content()
