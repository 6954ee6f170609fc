"""Helpers of the account tests (contract section 16): the user-token account API as a client
calls it, a browser session, and waiting for what every process must honour within 5 s."""

from __future__ import annotations

from typing import Any

from tests.flow_helpers import Page, PageSession

SESSION_FIELDS = {"sessionId", "kind", "createdAt", "lastUsedAt", "userAgent", "ipAddress", "current"}
PROFILE_FIELDS = {"userId", "email", "name", "avatar", "bio", "interestTags", "createdAt", "emailVerified"}
PROPAGATION_SECONDS = 5  # contract 16: every process honours an account change within 5 s


async def sessions_of(server: Any, user_token: str) -> list[dict]:
    r = await server.client.get("/api/account/sessions", bearer=user_token)
    assert r.status == 200, r.text
    return r.data["items"]


async def current_session_id(server: Any, user_token: str) -> str:
    (mine,) = [item for item in await sessions_of(server, user_token) if item["current"]]
    return mine["sessionId"]


async def end_session(server: Any, user_token: str, session_id: str):
    return await server.client.delete(f"/api/account/sessions/{session_id}", bearer=user_token)


async def patch_profile(server: Any, user_token: str, body: Any):
    return await server.client.request("PATCH", "/api/account/profile", json_body=body, bearer=user_token)


async def change_password(server: Any, user_token: str, current: str, new: str):
    return await server.client.post("/api/account/password", json={"currentPassword": current, "newPassword": new},
                                    bearer=user_token)


async def delete_account(server: Any, user_token: str, password: str):
    return await server.client.request("DELETE", "/api/account", json_body={"password": password}, bearer=user_token)


async def login_status(server: Any, email: str, password: str):
    return await server.client.post("/api/auth/login", json={"email": email, "password": password})


async def assert_user_token_revoked(server: Any, user_token: str) -> None:
    r = await server.client.get("/api/account/sessions", bearer=user_token)
    r.assert_error(401, "oauth2.token.revoked")
    assert r.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


async def signed_in_browser(server: Any, email: str, password: str,
                            url: str = "/account/apps") -> tuple[PageSession, Page]:
    """A browser that opened `url`, met the sign-in form, signed in, and is on `url`."""
    browser = PageSession(server)
    first = await browser.get(url)
    assert first.status == 200 and first.login_form() is not None, (first.status, first.text[:300])
    page = await browser.log_in(first, email, password)
    assert page.status == 200 and page.login_form() is None, (page.status, page.location, page.text[:300])
    return browser, page


def copy_of(browser: PageSession) -> PageSession:
    """Another browser holding a copy of `browser`'s cookies (a stolen cookie)."""
    thief = PageSession(browser.server)
    thief.cookies = dict(browser.cookies)
    return thief


async def shows_sign_in_form(browser: PageSession, url: str = "/account/apps") -> bool:
    page = await browser.get(url)
    return page.status == 200 and page.login_form() is not None


