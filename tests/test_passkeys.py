"""Passkeys (WebAuthn) in a real Chromium, with its virtual authenticator driven over the DevTools
protocol (`WebAuthn.addVirtualAuthenticator`: CTAP2, internal, resident keys, user verification),
on both databases. The server's public address is http://localhost:PORT: Chromium refuses
127.0.0.1 as a relying party ID.

A user adds a passkey at /account/security (and gets their recovery codes), signs in with it and no
email ("Sign in with a passkey"), through autofill on the email field, and as the second step after
the password; a second authenticator; removal (a recent sign-in needed). Refused: a credential of
another user as someone's second step, a passkey whose authenticator returns another user's handle,
an authenticator that did not verify the user, a removed passkey, a challenge used twice.

Assumed markup (not fixed by the contract): the passkeys are the `li.passkey-item` of `#passkeys`
(name in `.passkey-name`), each with a "Remove" button; the add form has a "Name it" field and an
"Add a passkey" button; the new recovery codes are the `<code>` items of `#passkey-recovery-codes`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import running_server
from tests.test_browser import Tab, open_tab, page_problems, screenshot

SECURITY = "/account/security"
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


@asynccontextmanager
async def device(browser: Any, server: Any):
    tab = await open_tab(browser, server)
    cdp = await tab.page.context.new_cdp_session(tab.page)
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    try:
        yield Device(tab, cdp)
    finally:
        await tab.page.context.close()


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
        await d.page.context.clear_cookies()  # a new visit, signed out
        # the sign-in page asks for the passkeys as autofill (conditional mediation) on load; the
        # virtual authenticator, with its UI off, answers with the one it holds
        await d.page.goto(d.tab.url("/login?next=/account/apps"))
        await d.page.wait_for_url(lambda url: urlsplit(url).path == "/account/apps")
        # a browser without passkey autofill: the page stays, the email field is there to type in
        await without_autofill(d)
        await d.page.context.clear_cookies()
        await d.page.goto(d.tab.url("/login?next=/account/apps"))
        await d.page.get_by_label("Email", exact=True).fill("someone@example.com")
        assert urlsplit(d.page.url).path == "/login"
        d.tab.assert_no_csp_violation()

