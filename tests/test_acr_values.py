"""`acr_values` at the authorization endpoint (OpenID Connect Core 3.1.2.1, Unmet Authentication
Requirements 1.0; RFC 9470 4): a sign-in that falls short of the first value the client lists is
made again with what reaches it, or, when the user has no such factor, the client hears
`unmet_authentication_requirements` (`interaction_required` under `prompt=none`)."""

from __future__ import annotations

import pytest

from tests.flow_helpers import REGISTERED_URI, PageSession, exchange, front_params, full_setup, oauth_url
from tests.support import unverified_claims
from tests.test_flow_pages import assert_redirect, consent_page
from tests.test_second_factors import oathtool, requires_oathtool

MFA, PHR, PWD = "urn:lbauth:acr:mfa", "phr", "urn:lbauth:acr:pwd"


@pytest.mark.parametrize("wanted", [MFA, PHR, f"{PHR} {MFA}"])
async def test_a_class_the_user_cannot_reach_is_unmet_authentication_requirements(server, wanted):
    """No second factor and no passkey: back to the client with the error and the state, after
    the sign-in, not a page the user cannot get past."""
    s = await full_setup(server)
    session = PageSession(server)
    page = await session.open_logged_in(oauth_url(front_params(s.client_id, s.redirect_uri, acr_values=wanted)),
                                        s.user["email"], s.user["password"])
    query = assert_redirect(page)
    assert query["error"] == ["unmet_authentication_requirements"] and query["state"] == ["st-front"], query
    assert "code" not in query


async def test_under_prompt_none_a_sign_in_that_falls_short_is_interaction_required(server):
    s = await full_setup(server)
    session, _ = await consent_page(server, s)  # signed in with a password in this browser
    page = await session.follow(await session.get(oauth_url(front_params(
        s.client_id, s.redirect_uri, scope="openid userinfo", prompt="none", acr_values=MFA))))
    assert assert_redirect(page)["error"] == ["interaction_required"]


@pytest.mark.parametrize("values", [PWD, "urn:example:unknown", f"urn:example:unknown {PWD}"])
async def test_a_class_already_met_or_unknown_changes_nothing(server, values):
    """A password sign-in meets the password class; values lbauth does not know are ignored."""
    s = await full_setup(server)
    _, page = await consent_page(server, s, acr_values=values)
    assert page.consent_form() is not None


@requires_oathtool
async def test_a_user_who_signed_in_before_adding_a_second_step_signs_in_again_with_it(server):
    """Signed in with a password in the browser, then an authenticator app added: a request for
    the multi-factor class shows the sign-in again, the code is asked for, and the tokens say so."""
    s = await full_setup(server)
    session, _ = await consent_page(server, s)
    enrol = await server.client.post("/api/account/security/totp", bearer=s.token)
    assert enrol.status == 200, enrol.text
    secret = enrol.data["secret"]
    confirm = await server.client.post("/api/account/security/totp/confirm", bearer=s.token,
                                       json={"code": oathtool(secret, server.clock.now())})
    assert confirm.status == 200, confirm.text
    server.clock.advance(30)

    page = await session.follow(await session.get(oauth_url(front_params(s.client_id, s.redirect_uri,
                                                                         acr_values=MFA))))
    assert page.status == 200 and page.login_form() is not None, (page.status, page.location)
    answer = await session.submit(page, page.login_form(), {"email": s.user["email"], "password": s.user["password"]})
    mfa_form = next(f for f in answer.forms if f.action == "/login/mfa")
    page = await session.follow(await session.submit(answer, mfa_form, {
        "method": "totp", "code": oathtool(secret, server.clock.now())}))
    assert page.consent_form() is not None, (page.status, page.location, page.text[:300])
    query = assert_redirect(await session.decide(page, "approve"))
    r = await exchange(server, query["code"][0], REGISTERED_URI, s.client_id, s.client_secret)
    assert r.status == 200, r.text
    claims = unverified_claims(r.data["accessToken"])
    assert claims["acr"] == MFA and claims["amr"] == ["pwd", "otp", "mfa"]
