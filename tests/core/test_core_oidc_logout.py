"""RP-initiated logout's decisions (lbauth/core/oidc/logout.py; OpenID Connect RP-Initiated Logout
1.0, contract 15) without HTTP, on a real SQLite database with the process's key ring (the
`services` of tests/conftest.py): which app is meant, whether the user goes back to it, with which
`state`, and whether the user is asked first."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lbauth import errors
from lbauth.core.accounts import users
from lbauth.core.oidc import logout
from lbauth.services import Services
from lbauth.storage.records import App
from tests.conftest import START_TIME

BACK = "https://rp.example/signed-out"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests (tests/test_oidc_logout.py) cover PostgreSQL


@pytest.fixture
async def client_id(services: Services) -> str:
    """An app that registered BACK as its post-logout redirect URI."""
    await users.create_user(services.db, services.clock, email="owner@example.com", name="O", password="plover kettle")
    app = await services.apps.create(name="RP", owner_email="owner@example.com", redirect_uris=["https://rp.example/cb"],
                                     post_logout_redirect_uris=[BACK])
    return app.client_id


async def hint(services: Services, client_id: str, *, session_id: str | None = "ses_1",
               now: int = START_TIME) -> str:
    return await services.id_tokens.mint(alg="RS256", client_id=client_id, asu="asu_1", auth_time=now, nonce=None,
                                         session_id=session_id, access_token="lba_at_x", now=now)


async def check(services: Services, **params: str | Sequence[str]) -> logout.Logout:
    """The outcome of a logout request sending `params` (a list: the parameter repeated)."""
    sent = {name: [value] if isinstance(value, str) else list(value) for name, value in params.items()}
    return await logout.check(services.db, services.keyring.public_keys, services.settings.issuer, sent)


def client_of(outcome: logout.Logout) -> str | None:
    return outcome.app.client_id if isinstance(outcome.app, App) else None


# ---- where the user goes afterwards ---------------------------------------------------------------------

@pytest.mark.parametrize(("uri", "state", "target"), [
    (None, "st", None),
    (BACK, None, BACK),
    (BACK, "st 1&2", BACK + "?state=st+1%262"),
    (BACK + "?lang=fr", "st", BACK + "?lang=fr&state=st"),
    (BACK + "?", "st", BACK + "?state=st"),
])
def test_the_target_carries_state_and_keeps_the_uris_query(uri, state, target):
    """RFC 6749 3.1.2 (a query the URI already has is kept); no URI: the signed-out page."""
    assert logout.Logout(app=None, redirect_uri=uri, state=state, hint_sid=None).target == target


@pytest.mark.parametrize(("hint_sid", "session_id", "asks"), [
    (None, None, False),  # no one signed in: nothing to ask
    ("ses_1", None, False),
    (None, "ses_1", True),  # no hint: a page anyone could link to must not end the session unasked
    ("ses_other", "ses_1", True),
    ("ses_1", "ses_1", False),  # the hint names this very session
])
def test_the_user_is_asked_first_unless_the_hint_names_the_session(hint_sid, session_id, asks):
    assert logout.Logout(app=None, redirect_uri=None, state=None, hint_sid=hint_sid).asks_first(session_id) is asks


async def test_a_request_with_nothing_ends_on_the_signed_out_page(services):
    assert await check(services) == logout.Logout(app=None, redirect_uri=None, state=None, hint_sid=None)


async def test_a_registered_uri_of_the_named_app_is_where_the_user_goes_back(services, client_id):
    outcome = await check(services, client_id=client_id, post_logout_redirect_uri=BACK, state="st")
    assert (client_of(outcome), outcome.target, outcome.hint_sid) == (client_id, BACK + "?state=st", None)


@pytest.mark.parametrize("uri", [BACK + "/", BACK + "?x=1", "https://RP.example/signed-out", "https://evil.example/"])
async def test_only_the_exactly_registered_uri_is_a_redirect(services, client_id, uri):
    outcome = await check(services, client_id=client_id, post_logout_redirect_uri=uri, state="st")
    assert (client_of(outcome), outcome.redirect_uri, outcome.target) == (client_id, None, None)


async def test_a_uri_without_a_known_app_is_no_redirect(services, client_id):
    for params in ({}, {"client_id": "cid_unknown"}, {"client_id": ""}):
        outcome = await check(services, post_logout_redirect_uri=BACK, **params)
        assert (outcome.app, outcome.target) == (None, None), params


# ---- id_token_hint ---------------------------------------------------------------------------------------

async def test_the_hint_alone_names_the_app_and_the_session(services, client_id):
    outcome = await check(services, id_token_hint=await hint(services, client_id), post_logout_redirect_uri=BACK)
    assert (client_of(outcome), outcome.target, outcome.hint_sid) == (client_id, BACK, "ses_1")
    assert not outcome.asks_first("ses_1") and outcome.asks_first("ses_2")


async def test_an_expired_hint_is_accepted(services, client_id):
    old = await hint(services, client_id, now=START_TIME - 30 * 86400)
    outcome = await check(services, id_token_hint=old, client_id=client_id, post_logout_redirect_uri=BACK)
    assert (client_of(outcome), outcome.target, outcome.hint_sid) == (client_id, BACK, "ses_1")


async def test_a_hint_without_sid_names_no_session(services, client_id):
    outcome = await check(services, id_token_hint=await hint(services, client_id, session_id=None))
    assert outcome.hint_sid is None and outcome.asks_first("ses_1")


async def test_a_client_id_other_than_the_hints_audience_is_refused(services, client_id):
    token = await hint(services, client_id)
    with pytest.raises(errors.ValidationFailed, match="client_id is not the client the id_token_hint was issued to"):
        await check(services, id_token_hint=token, client_id="cid_other", post_logout_redirect_uri=BACK)


async def test_a_hint_issued_to_several_audiences_names_no_app(services, client_id):
    """lbauth's ID tokens carry one audience: a hint with two names no app, and no client_id agrees."""
    claims = {"iss": services.settings.issuer, "sub": "asu_1", "aud": [client_id, "cid_other"], "sid": "ses_1"}
    token = services.keyring.signers["RS256"].sign(claims, typ="JWT")
    outcome = await check(services, id_token_hint=token, post_logout_redirect_uri=BACK)
    assert (outcome.app, outcome.target) == (None, None)
    with pytest.raises(errors.ValidationFailed, match="client_id is not the client"):
        await check(services, id_token_hint=token, client_id=client_id)


async def test_a_hint_this_server_did_not_issue_is_refused(services, client_id):
    token = await hint(services, client_id)
    for bad in ("not-a-jwt", token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")):
        with pytest.raises(errors.ValidationFailed, match="not an ID token this server issued"):
            await check(services, id_token_hint=bad, client_id=client_id, post_logout_redirect_uri=BACK)
    with pytest.raises(errors.ValidationFailed, match="not an ID token this server issued"):
        await logout.check(services.db, services.keyring.public_keys, "https://other.example",
                           {"id_token_hint": [token]})


# ---- the parameters themselves ----------------------------------------------------------------------------

async def test_every_parameter_may_be_sent_once_only(services):
    for name in logout.PARAMETERS:
        with pytest.raises(errors.ValidationFailed, match=f"{name} must be sent at most once"):
            await check(services, **{name: ["a", "b"]})


async def test_a_value_too_long_or_holding_nul_is_refused(services):
    longest = "s" * logout.MAX_PARAMETER_LENGTH
    for name in logout.PARAMETERS:
        for bad in (longest + "s", "a\x00b"):
            with pytest.raises(errors.ValidationFailed, match=f"{name} is not valid"):
                await check(services, **{name: bad})
        if name != "id_token_hint":  # the longest value passes (a hint that long is then not ours)
            assert (await check(services, **{name: longest})).target is None


async def test_empty_values_are_omitted_and_the_ignored_ones_change_nothing(services, client_id):
    outcome = await check(services, client_id=client_id, post_logout_redirect_uri=BACK, state="",
                          id_token_hint="", logout_hint="ada@example.com", ui_locales="fr")
    assert (client_of(outcome), outcome.target, outcome.hint_sid) == (client_id, BACK, None)
