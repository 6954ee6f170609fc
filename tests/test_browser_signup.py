"""Sign-up and password reset in a real browser (Playwright driving Debian's Chromium), with real
mail: a person starts at an app's authorization request, makes an account from the sign-in page,
follows the emailed link and lands back at the app's consent; another forgets their password and
sets a new one. Every new page also passes the phone and keyboard checks the other pages pass.
See tests/test_browser.py for how the browser is run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import TestServer, running_server
from tests.flow_helpers import REGISTERED_URI, front_params, oauth_url
from tests.mailbox import Mailbox, link_in
from tests.support import TIMEOUT_MS
from tests.test_browser import (
    APP_NAME,
    PHONE,
    Tab,
    decide,
    log_in,
    open_tab,
    page_problems,
    screenshot,
)

try:
    from playwright.async_api import expect
except ImportError:  # reported by the browser fixture
    pass

PASSWORD = "tulips along the old canal 7"


@pytest.fixture
async def mail_server(tmp_path: Path, database_url: str, mailbox: Mailbox) -> AsyncIterator[TestServer]:
    async with running_server(tmp_path, database_url, env="development", smtp_url=mailbox.url) as srv:
        yield srv


async def test_a_newcomer_signs_up_from_an_app_and_lands_at_its_consent(browser, mail_server, mailbox, tmp_path,
                                                                      request):
    srv = mail_server
    owner = await srv.create_user()
    app = await srv.create_app(owner["email"], name=APP_NAME, redirect_uris=[REGISTERED_URI])
    tab = await open_tab(browser, srv)
    page = tab.page
    await page.goto(tab.url(oauth_url(front_params(app["clientId"], REGISTERED_URI, state="newcomer"))))
    await page.get_by_role("link", name="Create an account").click()
    await page.get_by_label("Name").fill("Katherine Johnson")
    await page.get_by_label("Email").fill("katherine@example.com")
    await page.get_by_label("Password", exact=True).fill(PASSWORD)
    await page.get_by_label("Confirm password").fill(PASSWORD)
    await page.get_by_role("button", name="Create account").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")

    message = await mailbox.next(to="katherine@example.com")
    assert APP_NAME in message.get_body(("plain",)).get_content()
    await page.goto(link_in(message, "lba_su_"))
    await expect(page.get_by_role("heading", level=1)).to_contain_text(APP_NAME)  # the app's consent page
    await screenshot(tab, tmp_path, request, "consent-after-signup")
    query = await decide(tab, "Approve")
    assert query["state"] == ["newcomer"] and query["code"][0].startswith("lba_ac_")
    tab.assert_first_party()
    tab.assert_no_csp_violation()


async def test_a_user_resets_a_forgotten_password_in_the_browser(browser, mail_server, mailbox, tmp_path, request):
    srv = mail_server
    user = await srv.create_user(password=PASSWORD)
    tab = await open_tab(browser, srv)
    page = tab.page
    await page.goto(tab.url("/login"))
    await page.get_by_role("link", name="Forgot your password?").click()
    await page.get_by_label("Email").fill(user["email"])
    await page.get_by_role("button", name="Send me a link").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")

    await page.goto(link_in(await mailbox.next(to=user["email"]), "lba_pr_"))
    new_password = "marmalade on a rainy tuesday"
    await page.get_by_label("New password", exact=True).fill(new_password)
    await page.get_by_label("Confirm new password").fill(new_password)
    await page.get_by_role("button", name="Set the new password").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Password changed")
    await screenshot(tab, tmp_path, request, "password-changed")
    await log_in(tab, user["email"], new_password)
    await expect(page.get_by_role("heading", level=1)).not_to_have_text("Sign in")
    tab.assert_first_party()


async def test_the_new_pages_work_on_a_phone_and_with_a_keyboard(browser, mail_server, mailbox, tmp_path, request):
    srv = mail_server
    user = await srv.create_user(password=PASSWORD)
    context = await browser.new_context(viewport=PHONE)
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    tab = Tab(page=page, origin=srv.url)
    page.on("request", lambda r: tab.requested.append(r.url))
    await srv.client.post("/api/auth/password/forgot", json={"email": user["email"]})
    reset = link_in(await mailbox.next(to=user["email"]), "lba_pr_")
    found = {}
    for url in ("/signup", "/password/forgot", reset, "/signup/confirm?token=lba_su_unknown"):
        await page.goto(url if url.startswith("http") else tab.url(url))
        found[url] = await page_problems(page)
        await page.keyboard.press("Tab")  # the next stop is a link, a field or a button: nothing hidden
        assert await page.evaluate("document.activeElement.tagName") in ("A", "INPUT", "BUTTON"), url
    await log_in(tab, user["email"], PASSWORD)
    await page.goto(tab.url("/account/"))
    await expect(page.get_by_role("button", name="Send a verification link")).to_be_visible()
    found["/account/"] = await page_problems(page)
    await screenshot(tab, tmp_path, request, "account-with-email-on-a-phone")
    tab.assert_first_party()
    assert {url: problems for url, problems in found.items() if problems} == {}
