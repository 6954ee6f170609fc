"""The server-side half of the authorization code flow: POST /api/oauth/authorize/external, the two
token endpoints, GET /api/auth/me and GET /api/service/user/info (spec sections 4, 5, 7; contract
sections 3, 5, 6). Every error is checked as the envelope with HTTP status == code, and its subCode."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from urllib.parse import urlencode

import jwt
import pytest

from tests.client import Client
from tests.dpop_keys import DPoPKey
from tests.flow_helpers import (
    REGISTERED_URI,
    Setup,
    authorize,
    b64url,
    code_for,
    exchange,
    full_setup,
    pkce_pair,
    refresh,
    s256_challenge,
    tokens_for,
)
from tests.support import unverified_claims

ACCESS_TTL = 7200
CODE_TTL = 300
REFRESH_TTL = 2592000
MAX_VERIFIER_LEEWAY = 60  # contract 6: access tokens are verified with at most 60 s of leeway
TOKEN_SET_FIELDS = {"accessToken", "refreshToken", "tokenType", "expiresIn", "scope"}
ME_FIELDS = {"userId", "name", "email", "avatar", "bio", "appScopedUserId"}
USER_INFO_FIELDS = {"userId", "name", "email", "avatar", "bio", "interestTags"}
INVALID_TOKEN = 'Bearer error="invalid_token"'


async def me(server, bearer):
    return await server.client.get("/api/auth/me", bearer=bearer)


def assert_token_set(data: dict, scopes) -> None:
    assert set(data) == TOKEN_SET_FIELDS, data.keys()
    assert data["accessToken"].startswith("lba_at_")
    assert data["refreshToken"].startswith("lba_rt_")
    assert data["tokenType"] == "Bearer"
    assert data["expiresIn"] == ACCESS_TTL
    assert isinstance(data["scope"], list)
    assert sorted(data["scope"]) == sorted(scopes) and len(set(data["scope"])) == len(data["scope"])


def assert_no_store(r) -> None:
    assert "no-store" in r.headers.get("Cache-Control", ""), r.headers.get("Cache-Control")
    assert r.headers.get("Pragma") == "no-cache"


def tamper(token: str) -> str:
    """The token with one character of its JWS signature changed (in the middle, so that the
    change is in the signature bits and not only in the last character's padding bits)."""
    head, _, signature = token.rpartition(".")
    i = len(signature) // 2
    swapped = "B" if signature[i] != "B" else "C"
    return f"{head}.{signature[:i]}{swapped}{signature[i + 1:]}"


def test_pkce_helper_matches_rfc_7636_appendix_b():
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert s256_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    assert b64url(hashlib.sha256(b"").digest()) == "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    fresh, challenge = pkce_pair()
    assert len(fresh) == 43 and s256_challenge(fresh) == challenge


# ---- POST /api/oauth/authorize/external (spec 4.2) ----------------------------------------------------

async def test_authorize_returns_a_code_and_echoes_the_state(server):
    s = await full_setup(server)
    r = await authorize(server, s.token, s.client_id, s.redirect_uri, ["userinfo"], state="xyz-Ü 1&2")
    assert r.status == 200
    assert set(r.data) == {"code", "state"}
    assert r.data["code"].startswith("lba_ac_")
    assert r.data["state"] == "xyz-Ü 1&2"


async def test_authorize_unknown_client_is_application_not_found(server):
    s = await full_setup(server)
    r = await authorize(server, s.token, "cid_" + secrets.token_hex(12), s.redirect_uri)
    r.assert_error(404, "oauth2.application.not_found")


async def test_authorize_unregistered_redirect_uri_is_mismatch(server):
    s = await full_setup(server)
    r = await authorize(server, s.token, s.client_id, "https://other.example/callback")
    r.assert_error(400, "oauth2.redirect_uri.mismatch")


@pytest.mark.parametrize("scope", [
    ["admin"],
    ["user.info"],  # used in the spec's example, but not one of the nine (contract 5)
    ["chat"],  # likewise
    ["userinfo", "admin"],
    ["USERINFO"],
])
async def test_authorize_refuses_any_scope_outside_the_nine(server, scope):
    s = await full_setup(server)
    r = await authorize(server, s.token, s.client_id, s.redirect_uri, scope)
    r.assert_error(400, "oauth2.scope.invalid")


async def test_authorize_without_a_bearer_is_token_missing(server):
    s = await full_setup(server)
    r = await authorize(server, None, s.client_id, s.redirect_uri)
    r.assert_error(401, "oauth2.token.missing")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_authorize_with_a_garbage_bearer_is_token_invalid(server):
    s = await full_setup(server)
    r = await authorize(server, "lba_ut_" + secrets.token_urlsafe(32), s.client_id, s.redirect_uri)
    r.assert_error(401, "oauth2.token.invalid")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


@pytest.mark.parametrize("redirect_uri", ["http://localhost:5173/cb", "http://127.0.0.1:9999/x"])
async def test_unregistered_localhost_redirects_are_allowed(server, redirect_uri):
    s = await full_setup(server)
    assert redirect_uri not in s.app["redirectUris"]
    r = await authorize(server, s.token, s.client_id, redirect_uri)
    assert r.status == 200, r.text
    assert r.data["code"].startswith("lba_ac_")
    r = await exchange(server, r.data["code"], redirect_uri, s.client_id, s.client_secret)
    assert r.status == 200, r.text


LOOKALIKE_REDIRECTS = [
    "http://localhost.evil.example/cb",
    "http://localhost@evil.example/cb",
    "https://localhost:5173/cb",  # the unregistered loopback rule is for scheme http only
    "http://LOCALHOST:5173/cb",  # host exactly "localhost"
    REGISTERED_URI + "/",  # trailing slash
    REGISTERED_URI + "?x=1",  # extra query
    REGISTERED_URI + "#frag",  # fragment
    "https://app.example/Callback",  # case of the path
    "https://APP.example/callback",  # case of the host
    "https://app.example/call",  # a prefix
    "http://app.example/callback",  # scheme downgrade
    "https://app.example:443/callback",  # not byte-for-byte the registered URI
]


@pytest.mark.parametrize("redirect_uri", LOOKALIKE_REDIRECTS)
async def test_authorize_refuses_lookalike_redirects(server, redirect_uri):
    s = await full_setup(server, redirect_uris=[REGISTERED_URI])
    r = await authorize(server, s.token, s.client_id, redirect_uri)
    r.assert_error(400, "oauth2.redirect_uri.mismatch")



@pytest.mark.parametrize("scope", ["userinfo", "userinfo chat.read", 7, ["userinfo", 7], ["userinfo", None],
                                   [["userinfo"]], {"userinfo": True}])
async def test_authorize_scope_must_be_a_json_array_of_strings(server, scope):
    """Spec 4.2 types scope as string[] (contract 5): a bare string is not split and accepted."""
    s = await full_setup(server)
    r = await server.client.post("/api/oauth/authorize/external", bearer=s.token,
                                 json={"clientId": s.client_id, "redirectUri": s.redirect_uri, "scope": scope})
    r.assert_error(400, "request.validation_failed")


# ---- registered loopback URIs: any port (RFC 8252 7.3, RFC 9700 2.1; contract 5) ---------------------------

async def test_a_registered_ipv6_loopback_uri_accepts_any_port_through_the_exchange(server):
    """Registered without a port, called back on an ephemeral one; the exchange repeats the URI
    exactly as the authorization request sent it."""
    s = await full_setup(server, redirect_uris=["http://[::1]/callback"])
    requested = "http://[::1]:49152/callback"
    r = await authorize(server, s.token, s.client_id, requested)
    assert r.status == 200, r.text
    for other in ("http://[::1]/callback", "http://[::1]:49153/callback"):
        (await exchange(server, r.data["code"], other, s.client_id, s.client_secret)
         ).assert_error(400, "oauth2.redirect_uri.mismatch")
    assert (await exchange(server, r.data["code"], requested, s.client_id, s.client_secret)).status == 200


@pytest.mark.parametrize("requested", ["http://[::1]:49152/callback/", "http://[::1]:49152/other",
                                       "http://[::1]:49152/callback?x=1", "https://[::1]:49152/callback",
                                       "http://[::1]:99999/callback", "http://[0:0:0:0:0:0:0:1]:49152/callback"])
async def test_a_registered_loopback_uri_still_matches_scheme_host_path_and_query(server, requested):
    s = await full_setup(server, redirect_uris=["http://[::1]:8080/callback"])
    (await authorize(server, s.token, s.client_id, requested)).assert_error(400, "oauth2.redirect_uri.mismatch")


@pytest.mark.parametrize("pkce", [{"codeChallenge": "c" * 43},
                                  {"codeChallenge": "c" * 43, "codeChallengeMethod": "plain"},
                                  {"codeChallengeMethod": "S256"}])
async def test_authorize_refuses_pkce_without_s256(server, pkce):
    s = await full_setup(server)
    r = await authorize(server, s.token, s.client_id, s.redirect_uri, **pkce)
    r.assert_error(400, "request.validation_failed")


# ---- POST /api/oauth/token/code (spec 4.3) -----------------------------------------------------------

async def test_exchange_returns_the_token_set(server):
    s = await full_setup(server)
    code = await code_for(server, s, ["userinfo", "chat.read"])
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    assert r.status == 200, r.text
    assert r.json["code"] == 0
    assert_token_set(r.data, ["userinfo", "chat.read"])
    assert_no_store(r)


async def test_exchange_refuses_a_json_body(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    r = await server.client.post("/api/oauth/token/code", json={
        "grant_type": "authorization_code", "code": code, "redirect_uri": s.redirect_uri,
        "client_id": s.client_id, "client_secret": s.client_secret})
    body = r.assert_error(400, "request.validation_failed")
    # Spec 4.3: a JSON body reads as no fields; the message says what to send instead.
    assert body["message"] == ("Field required: grant_type (this endpoint reads application/x-www-form-urlencoded "
                               "fields, and the body was application/json)")
    assert (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).status == 200


@pytest.mark.parametrize("grant_type", ["refresh_token", "password", "AUTHORIZATION_CODE"])
async def test_exchange_refuses_other_grant_types(server, grant_type):
    s = await full_setup(server)
    code = await code_for(server, s)
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, grant_type=grant_type)
    r.assert_error(400, "oauth2.grant_type.invalid")


@pytest.mark.parametrize("code", ["lba_ac_" + "A" * 43, "not-a-code"])
async def test_exchange_unknown_code_is_invalid(server, code):
    s = await full_setup(server)
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    r.assert_error(400, "oauth2.code.invalid")


async def test_exchange_of_another_apps_code_is_invalid(server):
    s = await full_setup(server)
    other = await server.create_app(s.user["email"], name="Other App", redirect_uris=[REGISTERED_URI])
    code = await code_for(server, s)
    r = await exchange(server, code, REGISTERED_URI, other["clientId"], other["clientSecret"])
    r.assert_error(400, "oauth2.code.invalid")


async def test_exchange_with_a_wrong_client_secret_is_secret_mismatch(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    r = await exchange(server, code, s.redirect_uri, s.client_id, "lba_cs_" + secrets.token_urlsafe(32))
    r.assert_error(401, "oauth2.client.secret_mismatch")


@pytest.mark.parametrize("sent", ["https://app.example/second", REGISTERED_URI + "/", "http://localhost:5173/cb"])
async def test_exchange_redirect_uri_must_equal_the_authorize_requests(server, sent):
    s = await full_setup(server, redirect_uris=[REGISTERED_URI, "https://app.example/second"])
    code = await code_for(server, s, redirect_uri=REGISTERED_URI)
    r = await exchange(server, code, sent, s.client_id, s.client_secret)
    r.assert_error(400, "oauth2.redirect_uri.mismatch")


async def test_second_redemption_is_used_and_revokes_what_the_first_issued(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    first = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    assert first.status == 200, first.text
    tokens = first.data
    assert (await me(server, tokens["accessToken"])).status == 200

    again = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    again.assert_error(400, "oauth2.code.used")

    (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)
     ).assert_error(400, "oauth2.refresh_token.revoked")
    r = await me(server, tokens["accessToken"])
    r.assert_error(401, "oauth2.token.revoked")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def test_code_expires_after_five_minutes(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    server.clock.advance(CODE_TTL + 1)
    (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
     ).assert_error(400, "oauth2.code.expired")

    fresh = await code_for(server, s)
    server.clock.advance(CODE_TTL - 1)
    r = await exchange(server, fresh, s.redirect_uri, s.client_id, s.client_secret)
    assert r.status == 200, r.text


def assert_refused_for_the_query_string(r, field: str) -> None:
    """Contract 6: credentials in a query string are refused, as request.validation_failed naming
    the field and the query string; not "Field required" (which a server ignoring the query
    string would answer when the body lacks the secret), and no data."""
    r.assert_error(400, "request.validation_failed")
    assert set(r.json) == {"code", "message", "subCode"}, r.text
    assert field in r.json["message"] and "query string" in r.json["message"], r.text
    assert not r.json["message"].startswith("Field required"), r.text


@pytest.mark.parametrize("secret_also_in_body", [False, True])
async def test_client_secret_in_the_query_string_is_refused(server, secret_also_in_body):
    s = await full_setup(server)
    code = await code_for(server, s)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": s.redirect_uri,
            "client_id": s.client_id}
    if secret_also_in_body:
        form["client_secret"] = s.client_secret
    path = "/api/oauth/token/code?" + urlencode({"client_secret": s.client_secret})
    r = await server.client.post(path, form=form)
    assert_refused_for_the_query_string(r, "client_secret")
    # Nothing was used up: the code still redeems with the secret in the body.
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    assert r.status == 200, r.text


async def test_refresh_client_secret_in_the_query_string_is_refused(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    path = "/api/oauth/token/refresh?" + urlencode({"client_secret": s.client_secret})
    r = await server.client.post(path, form={"grant_type": "refresh_token", "client_id": s.client_id,
                                             "refresh_token": tokens["refreshToken"],
                                             "client_secret": s.client_secret})
    assert_refused_for_the_query_string(r, "client_secret")
    assert (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).status == 200


async def test_concurrent_redemptions_of_one_code_have_exactly_one_winner(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": s.redirect_uri,
            "client_id": s.client_id, "client_secret": s.client_secret}
    clients = [Client(server.url) for _ in range(20)]
    try:
        results = await asyncio.gather(*(c.post("/api/oauth/token/code", form=form) for c in clients))
    finally:
        for c in clients:
            c.close()
    winners = [r for r in results if r.status == 200]
    losers = [r for r in results if r.status != 200]
    assert len(winners) == 1, [r.status for r in results]
    assert len(losers) == 19
    for r in losers:
        r.assert_error(400, "oauth2.code.used")

    tokens = winners[0].data
    (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)
     ).assert_error(400, "oauth2.refresh_token.revoked")
    (await me(server, tokens["accessToken"])).assert_error(401, "oauth2.token.revoked")


# ---- PKCE (RFC 7636; contract 5) ------------------------------------------------------------------------

async def _pkce_code(server, s: Setup, challenge: str) -> str:
    return await code_for(server, s, codeChallenge=challenge, codeChallengeMethod="S256")


async def test_pkce_code_is_not_redeemed_without_a_verifier(server):
    s = await full_setup(server)
    _, challenge = pkce_pair()
    code = await _pkce_code(server, s, challenge)
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    r.assert_error(400, "oauth2.code_verifier.invalid")


async def test_pkce_code_is_not_redeemed_with_a_wrong_verifier(server):
    s = await full_setup(server)
    _, challenge = pkce_pair()
    code = await _pkce_code(server, s, challenge)
    wrong, _ = pkce_pair()
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, code_verifier=wrong)
    r.assert_error(400, "oauth2.code_verifier.invalid")


async def test_pkce_code_is_redeemed_with_the_right_verifier(server):
    s = await full_setup(server)
    verifier, challenge = pkce_pair()
    code = await _pkce_code(server, s, challenge)
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, code_verifier=verifier)
    assert r.status == 200, r.text
    assert_token_set(r.data, ["userinfo"])


async def test_code_without_a_challenge_refuses_a_verifier(server):
    """Downgrade protection: a verifier sent for a code issued without a challenge is refused."""
    s = await full_setup(server)
    code = await code_for(server, s)
    verifier, _ = pkce_pair()
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, code_verifier=verifier)
    r.assert_error(400, "oauth2.code_verifier.invalid")


# ---- POST /api/oauth/token/refresh (spec 4.4) -----------------------------------------------------------

async def test_refresh_issues_a_new_access_token_and_keeps_the_refresh_token(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s, ["userinfo", "chat.read"])
    seen = {tokens["accessToken"]}
    for _ in range(3):
        server.clock.advance(10)
        r = await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)
        assert r.status == 200, r.text
        assert_token_set(r.data, ["userinfo", "chat.read"])
        assert_no_store(r)
        assert r.data["refreshToken"] == tokens["refreshToken"]
        assert r.data["accessToken"] not in seen
        seen.add(r.data["accessToken"])
        assert (await me(server, r.data["accessToken"])).status == 200


async def test_me_says_why_a_user_token_is_refused(server):
    """A user token where an access token belongs: the answer says which is which."""
    s = await full_setup(server)
    body = (await me(server, s.token)).assert_error(401, "oauth2.token.invalid")
    assert body["message"] == ("This is a user token (from signing in); this endpoint takes an access token "
                               "(lba_at_...) from the token endpoint.")


async def test_refresh_refuses_a_json_body(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    r = await server.client.post("/api/oauth/token/refresh", json={
        "grant_type": "refresh_token", "refresh_token": tokens["refreshToken"],
        "client_id": s.client_id, "client_secret": s.client_secret})
    body = r.assert_error(400, "request.validation_failed")
    assert body["message"].startswith("Field required")


@pytest.mark.parametrize("grant_type", ["authorization_code", "client_credentials"])
async def test_refresh_refuses_other_grant_types(server, grant_type):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    r = await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret, grant_type=grant_type)
    r.assert_error(400, "oauth2.grant_type.invalid")


@pytest.mark.parametrize("token", ["lba_rt_" + "A" * 43, "garbage"])
async def test_refresh_unknown_token_is_invalid(server, token):
    s = await full_setup(server)
    r = await refresh(server, token, s.client_id, s.client_secret)
    r.assert_error(400, "oauth2.refresh_token.invalid")


async def test_refresh_token_is_bound_to_its_client(server):
    s = await full_setup(server)
    other = await server.create_app(s.user["email"], name="Other App")
    tokens = await tokens_for(server, s)
    r = await refresh(server, tokens["refreshToken"], other["clientId"], other["clientSecret"])
    r.assert_error(400, "oauth2.refresh_token.invalid")


async def test_refresh_with_a_wrong_client_secret_is_secret_mismatch(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    r = await refresh(server, tokens["refreshToken"], s.client_id, "lba_cs_" + secrets.token_urlsafe(32))
    r.assert_error(401, "oauth2.client.secret_mismatch")


async def test_refresh_token_expires_after_thirty_days(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    server.clock.advance(REFRESH_TTL - 1)
    r = await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)
    assert r.status == 200, r.text  # using it does not extend it (no rotation, no sliding)
    server.clock.advance(2)
    (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)
     ).assert_error(400, "oauth2.refresh_token.expired")


# ---- GET /api/auth/me (spec 4.5) ---------------------------------------------------------------------

async def test_me_returns_the_user_of_the_access_token(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    r = await me(server, tokens["accessToken"])
    assert r.status == 200, r.text
    data = r.data
    assert set(data) == ME_FIELDS
    assert data["userId"] == s.user["userId"]
    assert data["email"] == s.user["email"] and data["name"] == s.user["name"]
    assert isinstance(data["avatar"], str) and isinstance(data["bio"], str)
    assert data["appScopedUserId"].startswith("asu_") and len(data["appScopedUserId"]) > 4


async def test_app_scoped_user_id_is_stable_for_one_app(server):
    s = await full_setup(server)
    first = await tokens_for(server, s)
    server.clock.advance(60)
    second = await tokens_for(server, s, ["userinfo", "chat.read"])
    a = (await me(server, first["accessToken"])).data
    b = (await me(server, second["accessToken"])).data
    assert a["appScopedUserId"] == b["appScopedUserId"]
    assert a["userId"] == b["userId"] == s.user["userId"]


async def test_app_scoped_user_id_differs_between_apps(server):
    s = await full_setup(server)
    other_app = await server.create_app(s.user["email"], name="Other App")
    other = Setup(user=s.user, token=s.token, app=other_app)
    a = (await me(server, (await tokens_for(server, s))["accessToken"])).data
    b = (await me(server, (await tokens_for(server, other))["accessToken"])).data
    assert a["userId"] == b["userId"]
    assert a["appScopedUserId"] != b["appScopedUserId"]
    assert b["appScopedUserId"].startswith("asu_")


async def test_me_without_a_bearer_is_token_missing(server):
    r = await server.client.get("/api/auth/me")
    r.assert_error(401, "oauth2.token.missing")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_me_refuses_a_user_token(server):
    s = await full_setup(server)
    assert s.token.startswith("lba_ut_")
    r = await me(server, s.token)
    r.assert_error(401, "oauth2.token.invalid")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def test_me_refuses_an_expired_access_token(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    server.clock.advance(ACCESS_TTL - MAX_VERIFIER_LEEWAY - 1)
    assert (await me(server, tokens["accessToken"])).status == 200
    # Past exp by more than any leeway the contract allows (at most 60 s).
    server.clock.advance(2 * MAX_VERIFIER_LEEWAY + 2)
    r = await me(server, tokens["accessToken"])
    r.assert_error(401, "oauth2.token.expired")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def test_me_refuses_refresh_tokens_and_codes_as_bearer(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    code = await code_for(server, s)
    for bearer in (tokens["refreshToken"], code, "lba_at_" + secrets.token_urlsafe(32), "garbage"):
        r = await me(server, bearer)
        r.assert_error(401, "oauth2.token.invalid")
        assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def test_me_refuses_an_access_token_with_a_changed_signature(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    forged = tamper(tokens["accessToken"])
    assert forged != tokens["accessToken"]
    r = await me(server, forged)
    r.assert_error(401, "oauth2.token.invalid")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


# ---- GET /api/service/user/info (spec 4.6, contract 5) -----------------------------------------------

async def test_user_info_returns_the_profile_with_the_userinfo_scope(server):
    user = await server.create_user(name="Ada Lovelace", avatar="https://img.example/ada.png",
                                    bio="Analytical engines", interest_tags=["math", "looms"])
    token = await server.login(user["email"], user["password"])
    app = await server.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    s = Setup(user=user, token=token, app=app)
    tokens = await tokens_for(server, s, ["userinfo"])
    r = await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])
    assert r.status == 200, r.text
    assert r.data == {"userId": user["userId"], "name": "Ada Lovelace", "email": user["email"],
                      "avatar": "https://img.example/ada.png", "bio": "Analytical engines",
                      "interestTags": ["math", "looms"]}
    assert set(r.data) == USER_INFO_FIELDS


async def test_user_info_without_the_userinfo_scope_is_insufficient_scope(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s, ["chat.read"])
    r = await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])
    r.assert_error(403, "oauth2.scope.insufficient")
    assert r.headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope"'


async def test_user_info_refuses_a_user_token(server):
    s = await full_setup(server)
    r = await server.client.get("/api/service/user/info", bearer=s.token)
    r.assert_error(401, "oauth2.token.invalid")


# ---- the access token itself (contract 6, RFC 9068) ------------------------------------------------------

async def test_access_token_is_an_rfc_9068_jwt_signed_by_a_published_key(server):
    s = await full_setup(server)
    issued_at = int(server.clock.now())
    tokens = await tokens_for(server, s, ["userinfo", "chat.read"])
    asu = (await me(server, tokens["accessToken"])).data["appScopedUserId"]
    token = tokens["accessToken"]
    assert token.startswith("lba_at_")
    jws = token[len("lba_at_"):]

    header = jwt.get_unverified_header(jws)
    assert header["typ"] == "at+jwt"
    assert header["alg"] == server.settings.signing_alg
    assert isinstance(header.get("kid"), str) and header["kid"]

    claims = unverified_claims(jws)
    assert {"iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti", "gid", "asu"} <= set(claims)
    assert claims["iss"] == server.settings.issuer
    assert claims["aud"] == server.settings.audience
    assert claims["sub"] == s.user["userId"]
    assert claims["client_id"] == s.client_id
    assert isinstance(claims["scope"], str)
    assert sorted(claims["scope"].split(" ")) == ["chat.read", "userinfo"]
    assert claims["iat"] == issued_at
    assert claims["exp"] == claims["iat"] + ACCESS_TTL
    assert isinstance(claims["jti"], str) and claims["jti"]
    assert isinstance(claims["gid"], str) and claims["gid"]
    assert claims["asu"] == asu

    # The signature verifies with the key the server publishes (the clock is frozen in the future,
    # so times are checked above against it, not by PyJWT against the wall clock).
    jwks = (await server.client.get("/.well-known/jwks.json")).json
    matching = [k for k in jwks["keys"] if k.get("kid") == header["kid"]]
    assert len(matching) == 1
    key = jwt.PyJWK(matching[0])
    verified = jwt.decode(jws, key, algorithms=[header["alg"]], audience=server.settings.audience,
                          issuer=server.settings.issuer,
                          options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                                   "require": ["iss", "aud", "sub", "iat", "exp", "jti"]})
    assert verified == claims
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(tamper(jws), key, algorithms=[header["alg"]], audience=server.settings.audience,
                   options={"verify_exp": False, "verify_iat": False, "verify_nbf": False})


async def test_each_access_token_has_its_own_jti(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    again = (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).data
    first = unverified_claims(tokens["accessToken"])
    second = unverified_claims(again["accessToken"])
    assert first["jti"] != second["jti"]
    assert first["gid"] == second["gid"] and first["asu"] == second["asu"]


# ---- statement budgets (PERFORMANCE; contract 14 `statements`) -------------------------------------------

async def _statements(server, request) -> int:
    before = server.db.statements
    r = await request()
    assert r.status == 200, r.text
    return server.db.statements - before


async def _fewest_statements(server, requests) -> int:
    """The fewest statements over a few sequential runs of the same request, so that the server's
    own periodic work (the key reload every 5 s) landing inside one run cannot fail the budget."""
    return min([await _statements(server, request) for request in requests])


async def test_statement_budgets(server):
    """Issue 6: the full flow (authorize, exchange, /me) in at most 6 statements once the user has a
    grant. Exchange is one statement on PostgreSQL (a data-modifying CTE), two on SQLite."""
    await server.quiet()
    s = await full_setup(server)
    await code_for(server, s)  # the first approval creates the grant; later ones issue under it
    authorizes = [lambda: authorize(server, s.token, s.client_id, s.redirect_uri)] * 3
    authorize_count = await _fewest_statements(server, authorizes)
    # The app, and the code issued under the live grant; the session (issue 21) is known to this
    # process since the token's first request: no read.
    assert authorize_count == 2

    codes = [await code_for(server, s) for _ in range(3)]
    exchanges = [lambda c=c: exchange(server, c, s.redirect_uri, s.client_id, s.client_secret) for c in codes]
    exchange_count = await _fewest_statements(server, exchanges)
    assert exchange_count == (2 if server.db.is_sqlite else 1)

    tokens = await tokens_for(server, s)
    refreshes = [lambda: refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)] * 3
    assert await _fewest_statements(server, refreshes) == 1

    me_count = await _statements(server, lambda: me(server, tokens["accessToken"]))
    assert me_count <= 1  # the user's row, read once and then cached (until an edit is announced)
    mes = [lambda: me(server, tokens["accessToken"])] * 3
    assert await _fewest_statements(server, mes) == 0
    assert authorize_count + exchange_count + me_count <= 6


async def test_rfc_token_endpoint_statement_budgets(server):
    """Issue 20: /oauth/token authenticates the client once, inside the grant's own statement, as
    the envelope endpoints do: an exchange is one statement on PostgreSQL, two on SQLite; a
    refresh is one."""
    await server.quiet()
    s = await full_setup(server)

    def rfc(**form: str):
        return lambda: server.client.post("/oauth/token", form={
            **form, "client_id": s.client_id, "client_secret": s.client_secret})
    codes = [await code_for(server, s) for _ in range(3)]
    exchanges = [rfc(grant_type="authorization_code", code=c, redirect_uri=s.redirect_uri) for c in codes]
    assert await _fewest_statements(server, exchanges) == (2 if server.db.is_sqlite else 1)
    tokens = await tokens_for(server, s)
    refreshes = [rfc(grant_type="refresh_token", refresh_token=tokens["refreshToken"])] * 3
    assert await _fewest_statements(server, refreshes) == 1

    # RFC 9449: a DPoP-bound exchange records its proof's single use in the same statement on
    # PostgreSQL (a data-modifying CTE), in the same transaction on SQLite.
    key, url = DPoPKey(), server.settings.base_url + "/oauth/token"

    def bound(code: str):
        return lambda: server.client.post("/oauth/token", form={
            "grant_type": "authorization_code", "code": code, "redirect_uri": s.redirect_uri,
            "client_id": s.client_id, "client_secret": s.client_secret},
            headers={"DPoP": key.proof("POST", url, server.clock.now())})
    bound_exchanges = [bound(await code_for(server, s)) for _ in range(3)]
    assert await _fewest_statements(server, bound_exchanges) == (3 if server.db.is_sqlite else 1)


async def test_failed_redemptions_consume_nothing_and_name_the_right_error(server):
    """The one-statement redemption matches the client too; a wrong secret, client or redirect URI
    claims nothing, and the errors come in the order a client expects (client first)."""
    s = await full_setup(server)
    other = await full_setup(server)
    code = await code_for(server, s)
    (await exchange(server, code, s.redirect_uri, s.client_id, "wrong-secret")).assert_error(
        401, "oauth2.client.secret_mismatch")
    (await exchange(server, "not-a-code", s.redirect_uri, s.client_id, "wrong-secret")).assert_error(
        401, "oauth2.client.secret_mismatch")
    (await exchange(server, code, other.redirect_uri, other.client_id, other.client_secret)).assert_error(
        400, "oauth2.code.invalid")
    (await exchange(server, code, s.redirect_uri + "x", s.client_id, s.client_secret)).assert_error(
        400, "oauth2.redirect_uri.mismatch")
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    assert r.status == 200, r.text  # none of the failures consumed the code
    (await refresh(server, r.data["refreshToken"], s.client_id, "wrong-secret")).assert_error(
        401, "oauth2.client.secret_mismatch")
    (await refresh(server, r.data["refreshToken"], other.client_id, other.client_secret)).assert_error(
        400, "oauth2.refresh_token.invalid")
    assert (await refresh(server, r.data["refreshToken"], s.client_id, s.client_secret)).status == 200


async def test_access_token_verification_reads_no_database(server):
    """Refusing a bad, expired or revoked access token is decided in memory: 0 statements."""
    await server.quiet()
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    code = await code_for(server, s)
    first = (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).data
    await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)  # reuse: revokes `first`
    candidates = [first["accessToken"], tokens["accessToken"][:-3] + "abc", "lba_at_x.y.z"]
    for token in candidates:
        before = server.db.statements
        r = await me(server, token)
        assert r.status == 401 and server.db.statements == before
    server.clock.advance(7200 + 61)  # past any leeway the contract allows
    before = server.db.statements
    (await me(server, tokens["accessToken"])).assert_error(401, "oauth2.token.expired")
    assert server.db.statements == before


async def test_access_tokens_say_when_and_how_the_user_signed_in_and_a_refresh_keeps_it(server):
    """RFC 9068 2.2.1: `auth_time`, `acr` and `amr` in every access token (not only OpenID ones);
    a refresh an hour later keeps the first sign-in's, not the refresh's time."""
    signed_in_at = int(server.clock.now())
    setup = await full_setup(server)
    server.clock.advance(30)
    tokens = await tokens_for(server, setup)
    first = unverified_claims(tokens["accessToken"])
    assert (first["auth_time"], first["amr"], first["acr"]) == (signed_in_at, ["pwd"], "urn:lbauth:acr:pwd")
    server.clock.advance(3600)
    r = await refresh(server, tokens["refreshToken"], setup.client_id, setup.client_secret)
    assert r.status == 200, r.text
    again = unverified_claims(r.data["accessToken"])
    assert again["iat"] == signed_in_at + 3630
    assert (again["auth_time"], again["amr"], again["acr"]) == (signed_in_at, ["pwd"], "urn:lbauth:acr:pwd")
